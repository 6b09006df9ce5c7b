"""The cost of a bigger batch, from the gradient noise scale.

McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of Large-Batch Training"
(arXiv:1812.06162), Section 2.3: training to a given loss with batch B takes

    S = S_min (1 + B_noise / B)  optimizer steps, and
    E = E_min (1 + B / B_noise)  training examples,

where S_min is the fewest steps (infinite batch), E_min the fewest examples (tiny batch) and
B_noise the gradient noise scale; E_min = S_min * B_noise. At B = B_noise both are twice their
minimum. Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", arXiv:2001.08361,
Section 5.1) use the same relation with the critical batch B_crit in place of B_noise, and fit
it to language models as a function of the loss (Section 5.1):

    B_crit(L) = B* / L^(1 / alpha_B),  B* ~ 2e8 tokens, alpha_B ~ 0.21,

L the cross-entropy loss in nats per token (their WebText2 tokenisation); the critical batch
doubles for every ~13% decrease in the loss (0.87^(-1/0.21) = 1.94).

Batches and examples here are counted in tokens (a sequence of ``seq_length`` tokens is
``seq_length`` examples' worth of tokens), as Kaplan et al. count them for language models.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from solver.spec.errors import SpecError, check_in_range
from solver.spec.training import TRAIN_TOKENS_MAX

# Kaplan et al. 2020, Section 5.1 (their fit of B_crit against the loss): B* ~ 2e8 tokens.
KAPLAN_B_STAR_TOKENS = 2.0e8
# Kaplan et al. 2020, Section 5.1: alpha_B ~ 0.21.
KAPLAN_ALPHA_B = 0.21
# Losses in nats per token the fit is asked about: Kaplan's language models train to a few
# nats/token; 0.5 to 20 leaves room on both sides without admitting nonsense (0, negative, NaN).
TARGET_LOSS_RANGE = (0.5, 20.0)
# A noise scale from one token to 1e12 tokens (the largest fitted B_crit is ~1e7 tokens).
NOISE_SCALE_TOKENS_RANGE = (1.0, 1e12)
# Minimal token counts from 1 token to the most a plan may train (TrainingSpec's bound).
MIN_TOKENS_RANGE = (1.0, TRAIN_TOKENS_MAX)


class NoiseSource(str, Enum):
    REQUEST = "request"  # B_noise given in the request
    KAPLAN_2020 = "kaplan2020"  # B_crit(L) of Kaplan et al. 2020 at the request's target loss


def kaplan_critical_batch_tokens(loss_nats: float) -> float:
    """B_crit(L) = B* / L^(1/alpha_B) in tokens for a target loss ``loss_nats`` (nats/token):
    Kaplan et al. 2020, Section 5.1."""
    check_in_range("critical_batch.target_loss", loss_nats, *TARGET_LOSS_RANGE, "nats/token")
    return KAPLAN_B_STAR_TOKENS / loss_nats ** (1.0 / KAPLAN_ALPHA_B)


def steps_needed(batch_tokens: float, noise_scale_tokens: float, min_steps: float) -> float:
    """S = S_min (1 + B_noise / B): optimizer steps to reach the target at batch ``batch_tokens``
    (McCandlish et al. 2018, Section 2.3)."""
    return min_steps * (1.0 + noise_scale_tokens / batch_tokens)


def tokens_needed(batch_tokens: float, noise_scale_tokens: float, min_tokens: float) -> float:
    """E = E_min (1 + B / B_noise): tokens to reach the target at batch ``batch_tokens``
    (McCandlish et al. 2018, Section 2.3; examples counted in tokens)."""
    return min_tokens * (1.0 + batch_tokens / noise_scale_tokens)


@dataclass(frozen=True)
class NoiseScale:
    """The trade-off of one training run: its noise scale and its fewest tokens (E_min), both
    in tokens, and where the noise scale came from."""

    noise_scale_tokens: float
    min_tokens: float
    source: NoiseSource
    target_loss: float | None = None  # nats/token, when the noise scale is Kaplan's B_crit(L)

    @property
    def min_steps(self) -> float:
        """S_min = E_min / B_noise (McCandlish et al. 2018: S at B -> infinity)."""
        return self.min_tokens / self.noise_scale_tokens

    @staticmethod
    def given(min_tokens: float, noise_scale_tokens: float | None = None, target_loss: float | None = None) -> "NoiseScale":
        """From the request: E_min and either B_noise or a target loss; SpecError naming the
        ``critical_batch`` field otherwise."""
        check_in_range("critical_batch.min_tokens", min_tokens, *MIN_TOKENS_RANGE, "tokens")
        if noise_scale_tokens is not None and target_loss is None:
            check_in_range("critical_batch.noise_scale_tokens", noise_scale_tokens, *NOISE_SCALE_TOKENS_RANGE, "tokens")
            return NoiseScale(float(noise_scale_tokens), float(min_tokens), NoiseSource.REQUEST)
        if target_loss is not None and noise_scale_tokens is None:
            return NoiseScale(kaplan_critical_batch_tokens(target_loss), float(min_tokens), NoiseSource.KAPLAN_2020, float(target_loss))
        raise SpecError("critical_batch", "give exactly one of noise_scale_tokens and target_loss")


@dataclass(frozen=True)
class BatchCost:
    """What training with one global batch takes, before any hardware: steps and tokens, and
    how many of the tokens the batch's size adds (E - E_min)."""

    batch_tokens: float
    steps: float
    min_steps: float
    tokens: float
    extra_tokens: float


def batch_cost(noise: NoiseScale, batch_tokens: float) -> BatchCost:
    """Steps and tokens to reach the target at ``batch_tokens`` per step."""
    tokens = tokens_needed(batch_tokens, noise.noise_scale_tokens, noise.min_tokens)
    return BatchCost(
        batch_tokens=batch_tokens,
        steps=steps_needed(batch_tokens, noise.noise_scale_tokens, noise.min_steps),
        min_steps=noise.min_steps,
        tokens=tokens,
        extra_tokens=tokens - noise.min_tokens,
    )
