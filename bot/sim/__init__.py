"""Calibrated analytical cluster simulator for torchtitan recipes. Every number it produces is *simulated*.

Public API:
    simulate(model, hardware, nodes, devices_per_node, levers, pinned, seed) -> SimResult
    simulate_recipe(recipe, seed=0, levers=None) -> SimResult
    sim_loss_curve(steps, seed, *, model, global_batch_size, seq_len, lr, ...) -> list[float] (simulated)
    calibrate(factors=None, refit=False) -> CalibrationReport;  render_calibration(report) -> str
    sweep(...), one_lever_neighbours(...) -> list[SweepPoint]
    ZOO / get_model, HARDWARE / get_hardware
"""

from bot.sim.calibration import CalibrationReport, calibrate, fit_factors, render_calibration
from bot.sim.explore import SweepPoint, one_lever_neighbours, sweep
from bot.sim.hardware import HARDWARE, HardwareSpec, get_hardware
from bot.sim.noise import sim_loss_curve
from bot.sim.recipes import simulate_recipe
from bot.sim.simulate import Breakdown, SimResult, simulate
from bot.sim.zoo import ZOO, ModelSpec, get_model

__all__ = [
    "HARDWARE",
    "ZOO",
    "Breakdown",
    "CalibrationReport",
    "HardwareSpec",
    "ModelSpec",
    "SimResult",
    "SweepPoint",
    "calibrate",
    "fit_factors",
    "get_hardware",
    "get_model",
    "one_lever_neighbours",
    "render_calibration",
    "sim_loss_curve",
    "simulate",
    "simulate_recipe",
    "sweep",
]
