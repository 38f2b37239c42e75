"""Training and launching: ``TrainingArguments`` from the plan (``arguments``), fine-tuning with
transformers' ``Trainer`` (``fine_tuning``), training data (``data``), saving that never leaves a
half-written model (``saving``), and ``intelrt launch`` (``launching``)."""
