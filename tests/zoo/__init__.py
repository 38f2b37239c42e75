"""The model zoo: every architecture transformers ships, as a tiny random model, run through plain
transformers and through intelrt (issue 15). ``shrink`` makes tiny configs, ``build`` tiny models,
``sides`` runs both sides, ``table`` renders docs/model-zoo.md."""
