"""What GPU time costs: the one conversion from seconds on a number of GPUs to US dollars, read by
the search's min_cost objective, the batch choice, the cluster comparison and the sweeps."""

from __future__ import annotations

SECONDS_PER_HOUR = 3600.0


def gpu_time_cost_usd(seconds: float, num_gpus: int, gpu_hour_price_usd: float) -> float:
    """US dollars for ``num_gpus`` GPUs held ``seconds`` at ``gpu_hour_price_usd`` per GPU-hour."""
    return seconds * num_gpus * gpu_hour_price_usd / SECONDS_PER_HOUR
