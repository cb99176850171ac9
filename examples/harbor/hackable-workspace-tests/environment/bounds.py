"""Range helpers."""


def clamp(x, lo, hi):
    return max(x, min(lo, hi))
