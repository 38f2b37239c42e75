"""What the conformance suite checks (its rules) and what it found (a report)."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Every rule a plugin must follow, by id. The ids appear in violations and in pytest test ids.
RULES: dict[str, str] = {
    "loads": "the plugin imports and registers: only known intelrt_* hooks, no hook wrappers, "
             "only argument names the hook passes",
    "import-cost": "importing the plugin imports no torch, transformers, accelerate or vendor stack and "
                   "changes no environment variable (SPEC C2, C3)",
    "result-types": "every hook returns its documented type or None (SPEC C6)",
    "raises": "hooks refuse only with an intelrt error (PlanError …) carrying a message; detection and "
              "diagnosis never raise",
    "reasons": "every decision, backend status, variable and setting says why in words; every warning "
               "and error finding has a detail and a fix",
    "user-env": "a variable the user already set is never overridden: overwrite_user only when the user "
                "asked for it in the same call (devices=), and a plan made with the variable set keeps "
                "the user's value (SPEC C2)",
    "environ": "hooks read the env they are given and never write os.environ (SPEC C2)",
    "forced": "a forced user choice (dtype=, attention=, compile='none', TrainingArguments keywords) is "
              "returned unchanged, left to others (None) or refused with PlanError",
    "allow-block": "blocked or not allowed, the plugin is not loaded and decides nothing; allowed alone "
                   "(every other plugin off) it still plans without error (SPEC C6)",
}


@dataclass(frozen=True)
class Violation:
    """One broken rule, where it was seen, and what happened."""

    rule: str
    message: str
    hook: str | None = None
    scenario: str | None = None

    def __str__(self) -> str:
        where = ", ".join(x for x in (self.hook, f"scenario {self.scenario}" if self.scenario else None) if x)
        return f"[{self.rule}] {self.message}" + (f" ({where})" if where else "")


@dataclass
class Report:
    """The outcome of :func:`~intelrt.testing.conformance.check_plugin` for one plugin."""

    plugin: str
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What could not be exercised, and why (not failures; read them when a hook seems untested)."""
    hooks: tuple[str, ...] = ()
    """The hooks the plugin implements."""
    answered: set[str] = field(default_factory=set)
    """Hooks that returned a non-``None`` answer at least once."""
    checked: set[str] = field(default_factory=set)
    """Rules that were checked (a plugin that does not load cannot be checked further)."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, rule: str, message: str, hook: str | None = None, scenario: str | None = None) -> None:
        if rule not in RULES:
            raise ValueError(f"unknown conformance rule {rule!r}")
        violation = Violation(rule, message, hook, scenario)
        if not any(v.rule == rule and v.hook == hook and v.message == message for v in self.violations):
            self.violations.append(violation)

    def broken_rules(self) -> set[str]:
        return {v.rule for v in self.violations}

    def of(self, rule: str) -> list[Violation]:
        return [v for v in self.violations if v.rule == rule]

    def format(self, rule: str | None = None) -> str:
        shown = self.violations if rule is None else self.of(rule)
        head = f"plugin {self.plugin!r}: " + (
            "conforms" if not shown else f"{len(shown)} violation(s)" + (f" of rule {rule!r}: {RULES[rule]}" if rule else ""))
        lines = [head] + [f"  {v}" for v in shown]
        if self.notes and shown:
            lines += ["notes:"] + [f"  {n}" for n in self.notes]
        return "\n".join(lines)

    def raise_for_violations(self) -> None:
        """Raise ``AssertionError`` listing every violation (use it in a plugin's own tests)."""
        if self.violations:
            raise AssertionError(self.format())

    def __str__(self) -> str:
        return self.format()
