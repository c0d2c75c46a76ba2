"""Figures and verdicts computed from the model: phases, traffic phases, the limiter,
normalisation, CPU categories, thread states."""
