"""Choose the global batch size: the plan search at a handful of batch sizes, each costed for the
tokens its batch needs to reach the target (``solver.batch.noise``), and the batch whose best
plan trains fastest (min_time_to_train) or cheapest (min_cost).

At batch B (tokens per step B * seq_length) the run needs E(B) = E_min (1 + B / B_noise) tokens;
its best plan streams them at ``tokens_per_s``, so

    time_to_train_s = E(B) / tokens_per_s = S(B) * step_time_s,

of which ``time_for_min_tokens_s`` = E_min / tokens_per_s is the work any batch must do and
``time_for_extra_tokens_s`` = (E(B) - E_min) / tokens_per_s is what the batch's size adds. A larger
batch usually raises ``tokens_per_s`` (more data parallelism, fewer pipeline bubbles, less
per-step overhead) and always raises E(B): the best batch balances the two.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from solver.batch.noise import BatchCost, NoiseScale, NoiseSource, batch_cost
from solver.cost.price import gpu_time_cost_usd
from solver.search.loop import find_plans, search
from solver.search.request import Objective, SearchRequest
from solver.search.result import SearchResult
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.training import TRAIN_TOKENS_MAX

# The most global batch sizes one request compares: each is one plan search (~0.02 to 1 s).
MAX_BATCH_CANDIDATES = 8
# Without bounds the candidates run from the request's batch / 8 to its batch x 8 by doubling:
# seven searches, three halvings and three doublings around what the request asked for.
DEFAULT_SPAN = 8
# The largest global batch compared: the API's bound on training.global_batch_size (2^24
# sequences, app.core.types.Size), far past any critical batch of a language model.
MAX_GLOBAL_BATCH_SIZE = 2**24
OBJECTIVES = (Objective.MIN_TIME_TO_TRAIN, Objective.MIN_COST)


def candidate_batches(reference: int, minimum: int | None = None, maximum: int | None = None) -> tuple[int, ...]:
    """Global batch sizes (sequences) to compare: ``minimum``, 2 x ``minimum``, ... up to
    ``maximum``, and ``maximum`` and the request's own ``reference`` batch where they lie in the
    bounds. Defaults: ``reference`` / 8 and ``reference`` x 8. SpecError naming
    ``critical_batch.global_batch_size`` for more than ``MAX_BATCH_CANDIDATES``."""
    field = "critical_batch.global_batch_size"
    low = minimum if minimum is not None else max(1, reference // DEFAULT_SPAN)
    high = maximum if maximum is not None else min(reference * DEFAULT_SPAN, MAX_GLOBAL_BATCH_SIZE)
    if low < 1:
        raise SpecError(f"{field}.min", f"must be at least 1, got {low}")
    if high > MAX_GLOBAL_BATCH_SIZE:
        raise SpecError(f"{field}.max", f"must be at most {MAX_GLOBAL_BATCH_SIZE}, got {high}")
    if high < low:
        raise SpecError(f"{field}.max", f"max {high} is below min {low}")
    values = {high}
    value = low
    while value < high:
        values.add(value)
        value *= 2
    if low <= reference <= high:
        values.add(reference)
    if len(values) > MAX_BATCH_CANDIDATES:
        raise SpecError(
            field,
            f"{low} to {high} by doubling is {len(values)} batch sizes; at most {MAX_BATCH_CANDIDATES} are compared in one request",
        )
    return tuple(sorted(values))


@dataclass(frozen=True)
class BatchRequest:
    """What the request says about the batch: the noise scale and E_min, and the global batch
    sizes (sequences) to compare."""

    noise: NoiseScale
    global_batch_sizes: tuple[int, ...]


@dataclass(frozen=True)
class BatchPoint:
    """The best plan at one global batch size and what it takes to reach the target with it.
    Figures are None when nothing fits at this batch."""

    global_batch_size: int  # sequences per step
    cost: BatchCost  # steps and tokens, before any hardware
    num_gpus: int | None
    parallel: ParallelConfig | None
    step_time_s: float | None
    tokens_per_s: float | None
    time_to_train_s: float | None  # cost.tokens / tokens_per_s = cost.steps * step_time_s
    time_for_min_tokens_s: float | None  # E_min / tokens_per_s
    time_for_extra_tokens_s: float | None  # cost.extra_tokens / tokens_per_s
    cost_usd: float | None  # time_to_train_s x GPUs x GPU-hour price (None without a price)
    objective_value: float | None  # the search's: s (min_time_to_train) or USD (min_cost)


@dataclass(frozen=True)
class BatchChoice:
    noise: NoiseScale
    reference_global_batch_size: int  # the request's training.global_batch_size
    chosen_global_batch_size: int | None  # None: nothing fits at any candidate
    points: tuple[BatchPoint, ...]
    summary: str


def at_batch(request: SearchRequest, noise: NoiseScale, global_batch_size: int) -> SearchRequest:
    """``request`` at ``global_batch_size`` sequences per step, with the tokens that batch needs
    (E(B)) as its ``train_tokens``: the search's min_time_to_train and min_cost then rank by
    the time and cost of reaching the target at this batch."""
    cost = batch_cost(noise, global_batch_size * request.training.seq_length)
    if cost.tokens > TRAIN_TOKENS_MAX:
        raise SpecError(
            "critical_batch.min_tokens",
            f"a batch of {global_batch_size} sequences would need {cost.tokens:.4g} tokens, more than the {TRAIN_TOKENS_MAX:g} a plan may train",
        )
    training = replace(request.training, global_batch_size=global_batch_size, train_tokens=cost.tokens)
    return replace(request, training=training)


def _price_usd(request: SearchRequest) -> float | None:
    return request.gpu_hour_price_usd if request.gpu_hour_price_usd is not None else request.cluster.gpu_hour_price_usd


def _point(request: SearchRequest, noise: NoiseScale, global_batch_size: int) -> BatchPoint:
    """The best plan at one batch (``find_plans``: no ranking text, no explanation)."""
    sized = at_batch(request, noise, global_batch_size)
    cost = batch_cost(noise, global_batch_size * request.training.seq_length)
    held, _run = find_plans(replace(sized, top_k=1))
    if not held:
        return BatchPoint(global_batch_size, cost, None, None, None, None, None, None, None, None, None)
    best = held[0]
    prediction = best.evaluation.prediction
    tokens_per_s = prediction.tokens_per_s
    time_to_train_s = cost.tokens / tokens_per_s
    price = _price_usd(request)
    return BatchPoint(
        global_batch_size=global_batch_size,
        cost=cost,
        num_gpus=best.num_gpus,
        parallel=best.parallel,
        step_time_s=prediction.step_time_s,
        tokens_per_s=tokens_per_s,
        time_to_train_s=time_to_train_s,
        time_for_min_tokens_s=noise.min_tokens / tokens_per_s,
        time_for_extra_tokens_s=cost.extra_tokens / tokens_per_s,
        cost_usd=gpu_time_cost_usd(time_to_train_s, best.num_gpus, price) if price is not None else None,
        objective_value=best.value,
    )


def _summary(choice_noise: NoiseScale, points: tuple[BatchPoint, ...], chosen: BatchPoint | None, reference: int, objective: Objective) -> str:
    if choice_noise.source is NoiseSource.KAPLAN_2020:
        origin = f"Kaplan et al. 2020's B_crit at a loss of {choice_noise.target_loss:g} nats/token"
    else:
        origin = "the request"
    head = f"B_noise = {choice_noise.noise_scale_tokens:.4g} tokens ({origin}), E_min = {choice_noise.min_tokens:.4g} tokens"
    if chosen is None or chosen.time_to_train_s is None or chosen.time_for_extra_tokens_s is None:
        return head + f"; no plan fits at any of the {len(points)} batch sizes compared"
    unit = "time to train" if objective is Objective.MIN_TIME_TO_TRAIN else "cost"
    text = (
        f"{head}; batch {chosen.global_batch_size} has the least {unit} of {len(points)} compared: "
        f"{chosen.time_to_train_s:.4g} s, of which {chosen.time_for_extra_tokens_s:.4g} s stream the "
        f"{chosen.cost.extra_tokens / choice_noise.min_tokens:.1%} extra tokens its size costs"
    )
    larger = [p for p in points if p.global_batch_size > chosen.global_batch_size and p.time_to_train_s is not None]
    smaller = [p for p in points if p.global_batch_size < chosen.global_batch_size and p.time_to_train_s is not None]
    if larger:
        p = larger[0]
        text += (
            f"; batch {p.global_batch_size} streams {p.tokens_per_s:.4g} tokens/s against {chosen.tokens_per_s:.4g} but "
            f"needs {p.cost.tokens:.4g} tokens"
        )
    if smaller:
        p = smaller[-1]
        text += (
            f"; batch {p.global_batch_size} needs only {p.cost.tokens:.4g} tokens but streams {p.tokens_per_s:.4g} tokens/s"
        )
    at_reference = [p for p in points if p.global_batch_size == reference and p.time_to_train_s is not None]
    if at_reference and reference != chosen.global_batch_size:
        text += f"; the request's batch {reference} takes {at_reference[0].time_to_train_s:.4g} s"
    return text


def choose_batch(request: SearchRequest, batch: BatchRequest) -> tuple[SearchResult, BatchChoice]:
    """The best global batch of ``batch.global_batch_sizes`` for ``request``'s objective and the
    full search (top k, or the explanation of an infeasible one) at it; at the request's own
    batch when nothing fits anywhere."""
    objective = Objective(request.objective)
    if objective not in OBJECTIVES:
        raise SpecError("objective", "choosing the batch from critical_batch needs min_time_to_train or min_cost")
    if request.training.train_tokens is not None:
        raise SpecError("training.train_tokens", "give train_tokens or critical_batch (which sets the tokens per batch), not both")
    points = tuple(_point(request, batch.noise, size) for size in batch.global_batch_sizes)
    ranked = [p for p in points if p.objective_value is not None]
    chosen = min(ranked, key=lambda p: (p.objective_value, p.global_batch_size)) if ranked else None
    reference = request.training.global_batch_size
    final = chosen.global_batch_size if chosen is not None else reference
    result = search(at_batch(request, batch.noise, final))
    summary = _summary(batch.noise, points, chosen, reference, objective)
    return result, BatchChoice(batch.noise, reference, chosen.global_batch_size if chosen else None, points, summary)
