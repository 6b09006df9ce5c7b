"""From a budget of GPU time on a cluster to the compute-optimal model that spends it.

The compute C a budget buys depends on how fast the model trains, and the model depends on C.
``size_to_budget`` iterates: C -> (N, D) -> a shape of the family -> its best plan on the
cluster (``solver.search``) -> the GPU time it takes to train D tokens -> C scaled by budget /
used, until the plan uses the budget within ``BUDGET_TOLERANCE``; then the shape's tokens are
scaled to spend the budget. The first C assumes ``FIRST_GUESS_MFU`` of the GPU's peak.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from solver.cost.flops import total_parameter_count
from solver.search.loop import find_plans
from solver.search.request import Objective, SearchRequest
from solver.sizing.chinchilla import Optimum, SizingRule, loss, optimum, tokens_for
from solver.sizing.shape import shape_for
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig

# The fraction of peak the first guess assumes: large dense training runs reach 0.3 to 0.55 MFU
# (Chowdhery et al. 2022, PaLM, Table 3: GPT-3 21.3%, Gopher 32.5%, Megatron-Turing 30.2%, PaLM 46.2%).
FIRST_GUESS_MFU = 0.4
# The model size is settled once a plan uses the budget within this fraction (the tokens then
# fill it exactly).
BUDGET_TOLERANCE = 0.05
MAX_ITERATIONS = 12
# The filled tokens stay this hair under the budget, so float rounding never puts them over.
FILL_MARGIN = 1 - 1e-9


@dataclass(frozen=True)
class SizedPlan:
    """The model a budget buys (or that a model should get), its plan and what it costs."""

    optimum: Optimum  # the compute-optimal (N, D) the shape was built for
    model: ModelSpec
    parameters: int  # the shape's exact count
    tokens: float
    predicted_loss: float  # L(parameters, tokens)
    parallel: ParallelConfig | None  # None: no split of this model fits the cluster
    num_gpus: int
    time_to_train_s: float | None
    gpu_seconds: float | None
    mfu: float | None
    iterations: int

    @property
    def fits(self) -> bool:
        return self.parallel is not None


def plan_model(request: SearchRequest, model: ModelSpec, tokens: float) -> tuple[ParallelConfig | None, float | None, float | None]:
    """The fastest split of ``model`` training ``tokens`` tokens on the request's GPUs: its
    parallel config, time to train (s) and MFU; Nones when nothing fits."""
    training = replace(request.training, train_tokens=tokens)
    held, _run = find_plans(replace(request, model=model, training=training, objective=Objective.MIN_TIME_TO_TRAIN, top_k=1))
    if not held:
        return None, None, None
    prediction = held[0].evaluation.prediction
    return held[0].parallel, prediction.time_to_train_s, prediction.mfu


def _sized(request: SearchRequest, opt: Optimum, name: str, iterations: int, exact_tokens: bool) -> SizedPlan:
    model = shape_for(request.model, opt.parameters, request.training.seq_length, name)
    parameters = total_parameter_count(model)
    # The shape's own count sets the tokens (D = r N or the parametric D for N), unless the
    # tokens were asked for as they are.
    tokens = opt.tokens if exact_tokens else opt.tokens * parameters / opt.parameters
    parallel, time_s, mfu = plan_model(request, model, tokens)
    num_gpus = request.num_gpus or request.cluster.num_gpus
    return SizedPlan(
        opt, model, parameters, tokens, loss(parameters, tokens), parallel, num_gpus, time_s,
        None if time_s is None else time_s * num_gpus, mfu, iterations,
    )


def _fill(request: SearchRequest, sized: SizedPlan, gpu_seconds: float) -> SizedPlan:
    """The same model on as many tokens as the budget pays for: a plan's time is linear in its
    tokens (steps x step time), so the tokens scale by budget / used (a hair under, for rounding)."""
    if sized.gpu_seconds is None:
        return sized
    tokens = sized.tokens * gpu_seconds / sized.gpu_seconds * FILL_MARGIN
    parallel, time_s, mfu = plan_model(request, sized.model, tokens)
    return replace(
        sized, tokens=tokens, predicted_loss=loss(sized.parameters, tokens), parallel=parallel, time_to_train_s=time_s,
        gpu_seconds=None if time_s is None else time_s * sized.num_gpus, mfu=mfu,
    )


def size_to_budget(request: SearchRequest, gpu_seconds: float, rule: SizingRule, tokens_per_parameter: float, name: str) -> SizedPlan:
    """The compute-optimal model of ``request.model``'s family whose best plan on the request's
    GPUs trains within ``gpu_seconds`` (see the module docstring). Shapes are discrete (a layer
    more or less), so once the size is settled the tokens are scaled to spend the budget: the
    tokens per parameter land near, not exactly on, the rule's. ``fits`` is False when no shape
    tried has a plan on these GPUs."""
    peak_flops_per_s = request.cluster.gpu.peak(request.training.precision)
    compute_flops = gpu_seconds * peak_flops_per_s * FIRST_GUESS_MFU  # GPU-seconds x FLOP/s per GPU
    chosen: SizedPlan | None = None
    last: SizedPlan | None = None
    for iteration in range(1, MAX_ITERATIONS + 1):
        last = _sized(request, optimum(compute_flops, rule, tokens_per_parameter), name, iteration, exact_tokens=False)
        if last.gpu_seconds is None:
            compute_flops /= 2  # nothing fits: a smaller model splits more easily
            continue
        chosen = last
        used = last.gpu_seconds / gpu_seconds
        if abs(used - 1) <= BUDGET_TOLERANCE:
            break
        compute_flops /= used
    if chosen is None:
        if last is None:
            raise ValueError("MAX_ITERATIONS must be at least 1")
        return last
    return _fill(request, chosen, gpu_seconds)


def size_model(request: SearchRequest, rule: SizingRule, tokens_per_parameter: float) -> SizedPlan:
    """The inverse: ``request.model`` as it is, the tokens that make it compute-optimal, and its
    best plan on the request's GPUs."""
    model = replace(request.model, seq_length=request.training.seq_length)
    opt = tokens_for(total_parameter_count(model), rule, tokens_per_parameter)
    parallel, time_s, mfu = plan_model(request, model, opt.tokens)
    num_gpus = request.num_gpus or request.cluster.num_gpus
    return SizedPlan(
        opt, model, int(opt.parameters), opt.tokens, opt.loss, parallel, num_gpus, time_s,
        None if time_s is None else time_s * num_gpus, mfu, 1,
    )
