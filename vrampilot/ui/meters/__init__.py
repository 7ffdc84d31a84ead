"""The Meters tab and the status bar's compact meters: what the samplers read (vrampilot.meters),
drawn against the loaded plan, with the spill check and its one-click fix."""
