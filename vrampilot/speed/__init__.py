"""What this machine measured: the speed probe of its CPU (host_probe.py, with the tiny model of
probe_model.py and the built-in model's run of reference_run.py) and of its offload devices
(device_probe.py), the pace gauge read after replies (pace.py), other programs' load meanwhile
(cpu_load.py), the record of it all and of predicted against measured replies (measured.py), kept
per machine in the data folder (store.py) and shown by `vrampilot doctor` (report.py).

Qt-free. service.py is the one way the front ends measure and read the record. The speed model that
predicts a plan's tokens/s from these figures, and learns from each reply, is the planner's
(planner/speed_model/predict.py, planner/calibration.py).
"""
