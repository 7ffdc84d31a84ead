"""Does the document fit the plan, and what would it take? Every number comes from the planner.

The context a document needs is its tokens plus room for the question, the reply and the chat
template. When the current plan is too small the planner is asked again with that context pinned
(it chooses the rest: KV cache type, layers, batch), and the answer is put in numbers: "needs 58K
tokens: the current plan has 32K. At q8_0 KV, 64K fits on this GPU at about 61 tokens/s (was 68)".
When no plan can hold it — memory, or the model's trained context — the answer is retrieval.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from vrampilot.planner.plan import Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.search.draft import replan_keeping_draft
from vrampilot.units import format_tokens

# fits: the current plan holds it; replan: a plan with more context holds it (offered);
# beyond_training: one holds it in memory, past the model's trained context (offered, retrieval until);
# too_large: no plan on this machine holds it (retrieval).
FitStatus = Literal["fits", "replan", "too_large", "beyond_training"]
# Room kept for the user's question and the chat template's markup around the document.
QUESTION_TOKENS = 512
TEMPLATE_TOKENS = 64
DEFAULT_REPLY_TOKENS = 512


def tokens_text(n: int) -> str:
    """Token counts the way the fit message says them: 812, 5.8K, 41K."""
    if n < 1000:
        return str(n)
    if n < 10 * 1024:
        return f"{n / 1024:.1f}K"
    return f"{round(n / 1024)}K"


def ctx_text(n: int) -> str:
    """Context sizes: 32K, 1.5K, 48K (format_tokens' way, plus halves of K)."""
    if n >= 1024 and n % 512 == 0 and n % 1024:
        return f"{n / 1024:g}K"
    return format_tokens(n)


def nice_ctx(n: int) -> int:
    """Smallest context of the form 2^k or 1.5 * 2^k that holds `n` (what people pick: 24K, 32K, 48K)."""
    size = 512
    while True:
        if size >= n:
            return size
        if size * 3 // 2 >= n:
            return size * 3 // 2
        size *= 2


def needed_context(doc_tokens: int, reply_tokens: int = DEFAULT_REPLY_TOKENS) -> int:
    return doc_tokens + reply_tokens + QUESTION_TOKENS + TEMPLATE_TOKENS


@dataclass(frozen=True)
class FitReport:
    status: FitStatus
    doc_tokens: int
    needed_tokens: int  # document + question + reply + template
    n_ctx: int  # the current plan's context
    message: str
    suggested_ctx: int | None = None  # replan: the context to pin
    replan: Plan | None = None  # replan: the plan that holds it (already computed by the planner)
    max_ctx: int | None = None  # too_large: the largest context any plan here holds

    @property
    def fits(self) -> bool:
        return self.status == "fits"

    @property
    def mode(self) -> Literal["full", "retrieval"]:
        """What the next question uses with the current plan: the whole text, or retrieved chunks."""
        return "full" if self.fits else "retrieval"

    def to_dict(self) -> dict[str, object]:
        return {
            "status": self.status,
            "mode": self.mode,
            "doc_tokens": self.doc_tokens,
            "needed_tokens": self.needed_tokens,
            "n_ctx": self.n_ctx,
            "suggested_ctx": self.suggested_ctx,
            "max_ctx": self.max_ctx,
            "message": self.message,
            **(
                {"replan_settings": self.replan.settings.to_dict(), "replan_decode_tps": self.replan.speed.decode_tps}
                if self.replan
                else {}
            ),
        }


def _tps(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _kv_text(p: Plan) -> str:
    s = p.settings
    return s.type_k if s.type_k == s.type_v else f"K {s.type_k} / V {s.type_v}"


def _where(p: Plan) -> str:
    t = p.target
    if not t.has_gpu:
        return "in RAM"
    max_ngl = p.spec.n_layer + 1
    gpu = (
        "this GPU"
        if "profile" not in t.description and "hypothetical" not in t.description
        else f"the {t.gpus[0].name}"
    )
    if p.settings.n_gpu_layers >= max_ngl:
        return f"on {gpu}"
    return f"with {p.settings.n_gpu_layers} of {max_ngl} layers on {gpu}"


def _plan_at(current: Plan, n_ctx: int) -> Plan:
    return plan(
        current.spec, current.target, replace(current.pins, n_ctx=n_ctx), alternatives=False, exact=current.exact
    )


def max_context(current: Plan, upto: int) -> int | None:
    """The largest context (of the nice sizes, up to `upto`) that the planner can fit here."""
    sizes = []
    n = 512
    while n <= upto:
        sizes.append(n)
        if n * 3 // 2 <= upto:
            sizes.append(n * 3 // 2)
        n *= 2
    lo, hi, best = 0, len(sizes) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if _plan_at(current, sizes[mid]).fits:
            best = sizes[mid]
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def analyze_fit(current: Plan, doc_tokens: int, *, reply_tokens: int = DEFAULT_REPLY_TOKENS) -> FitReport:
    """How `doc_tokens` of documents relate to `current`, with a re-plan when one would hold them."""
    n_ctx = current.settings.n_ctx
    needed = needed_context(doc_tokens, reply_tokens)
    if needed <= n_ctx:
        return FitReport(
            "fits", doc_tokens, needed, n_ctx, f"fits: {tokens_text(doc_tokens)} of {ctx_text(n_ctx)} context"
        )
    head = f"needs {tokens_text(needed)} tokens: the current plan has {ctx_text(n_ctx)}."
    trained = current.spec.n_ctx_train
    suggested = nice_ctx(needed)
    beyond = trained > 0 and suggested > trained
    if beyond and needed <= trained:
        suggested, beyond = trained, False
    new = replan_keeping_draft(current, n_ctx=suggested)
    if new.fits:
        offer = (
            f"At {_kv_text(new)} KV, {ctx_text(suggested)} fits {_where(new)} at about "
            f"{_tps(new.speed.decode_tps_full_ctx)} tokens/s (was {_tps(current.speed.decode_tps_full_ctx)})"
        )
        if not beyond:
            msg = f"{head} {offer}; Re-plan?"
            return FitReport("replan", doc_tokens, needed, n_ctx, msg, suggested_ctx=suggested, replan=new)
        # The planner warns past the trained context rather than refusing (some models extend it
        # with rope scaling); for a document the safe default is retrieval, with the re-plan offered.
        msg = (
            f"{head} {offer}, but {current.spec.display_name} was trained for {ctx_text(trained)} and "
            f"reads poorly past it, so answers come from the most relevant passages (retrieval); Re-plan anyway?"
        )
        return FitReport(
            "beyond_training", doc_tokens, needed, n_ctx, msg, suggested_ctx=suggested, replan=new, max_ctx=trained
        )
    best = max_context(current, suggested)
    where = "this GPU" if current.target.has_gpu else "this machine"
    if best is not None:
        limit = f"the best plan for {where} holds {ctx_text(best)}"
    else:
        limit = f"no plan for {where} holds even {ctx_text(512)}"
    msg = f"{head} Even {limit}: answering from the most relevant passages instead (retrieval)."
    return FitReport("too_large", doc_tokens, needed, n_ctx, msg, max_ctx=best)
