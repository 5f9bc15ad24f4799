"""Rewards for generated tasks (`toolgym tasks generate`), for a config env's `[[rewards]]`:

    [[rewards]]
    name = "correct"
    type = "python"
    function = "toolgym.tasks.rewards:correct"
    weight = 1.0

`correct`: the final answer (inside `<answer>` tags, else the last message) contains the task's answer. When the
model's last call equals the task's last expected call, the answer is read from *this rollout's* result of that call
(the task's `answer_field`, else the result's text or first line, the generator's rule), so a server whose results
change between runs (today's date in a converted time) is judged on what it answered now. A task without an answer
(its result had no short one) counts as correct when the calls equal the expected calls.
"""

from __future__ import annotations

from typing import Any

from toolgym.accuracy import call_matches
from toolgym.config_env import compare, final_answer


def _calls_match(task: dict[str, Any], calls: list[Any]) -> bool:
    expected = task.get("expected_calls") or []
    return len(calls) == len(expected) and all(call_matches(c.name, c.arguments, e)
                                               for c, e in zip(calls, expected, strict=True))


def correct(task: dict[str, Any], messages: list[dict[str, Any]], calls: list[Any]) -> float:
    """See the module docstring."""
    from toolgym.tasks.generate import ANSWER_MAX_CHARS, pick_answer

    want = task.get("answer")
    expected = task.get("expected_calls") or []
    if expected and calls and calls[-1].exec_ok and call_matches(calls[-1].name, calls[-1].arguments, expected[-1]):
        live, _ = pick_answer(calls[-1].result or "", tuple(task.get("answer_field") or ()) or None,
                              ANSWER_MAX_CHARS)
        if want is not None and live is not None:
            want = live
    if want is None:
        return float(_calls_match(task, calls))
    return float(compare(final_answer(messages), want, "contains"))


__all__ = ["correct"]
