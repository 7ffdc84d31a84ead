"""Planner: memory model, speed model, settings search, reasons."""
