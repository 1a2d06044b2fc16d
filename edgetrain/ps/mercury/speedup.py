"""Mercury's speed-up model ([MC §3.2, Eq. 5]) and the figures it is fed with. Pure.

``Speedup = E (T_cp + T_cm) / (E_is (T_cp + T_cm + T_is))
         = 1 / ((E_is / E) (1 + T_is / (T_cp + T_cm)))``

``E``, ``E_is``: iterations to the target without and with importance sampling; ``T_cp``,
``T_cm``: compute and communication per iteration; ``T_is``: the extra time importance
sampling adds per iteration (everything in an iteration that is neither).
"""

from __future__ import annotations

from collections.abc import Sequence


def predicted(e: float, e_is: float, t_cp: float, t_cm: float, t_is: float) -> float | None:
    """Eq. 5 (None when a term is missing or not positive)."""
    if e <= 0 or e_is <= 0 or t_cp + t_cm <= 0:
        return None
    return 1.0 / ((e_is / e) * (1.0 + max(0.0, t_is) / (t_cp + t_cm)))


def iterations_to(points: Sequence[tuple[int, float | None]], target: float) -> int | None:
    """The first ``(iterations, accuracy)`` point at or above ``target``: its iterations."""
    for iterations, accuracy in points:
        if accuracy is not None and accuracy >= target:
            return iterations
    return None
