"""Scripted policies shared by the flow tests and the end-to-end stack test."""

from __future__ import annotations

from ragfactory.tasks.llm.types import Request


def decex_policy(golden: dict[str, str]):
    """Well-formed DecEx replies; a branch that went through "fact 1" ends in a wrong answer."""

    def reply(request: Request, sample: int) -> str:
        prompt = request.messages[0].content
        gold = next((a for q, a in golden.items() if q in prompt), "unknown")
        answer = f"wrong {sample}" if "fact 1" in prompt else gold
        if len(request.messages) > 1 or "Please generate a query" not in prompt and "<search>" in prompt:
            return f"<answer>{answer}</answer>"  # rollouts
        if "Please judge based on the available information" in prompt:
            done = "Sub-question:" in prompt
            return f"<answer>{answer}</answer>" if done else f"<question>What is fact {sample}?</question>"
        if "break down the original question" in prompt:
            return f"<reasoning>step</reasoning> <question>What is fact {sample}?</question>"
        if "Please generate a query for search engines" in prompt:
            return f"fact {sample} lookup"
        return f"<answer>{answer}</answer>"

    return reply
