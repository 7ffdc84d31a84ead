"""The lock held around every llama.cpp call that swaps or depends on its global log callback.

llama.cpp has one process-wide log callback. The planner's dry runs capture it to read buffer
sizes; a model load needs its error lines to reach `log`. Both hold LOG_LOCK, so neither sees the
other's lines. It lives here, below the planner and the engine that both take it.
"""

from __future__ import annotations

import threading

LOG_LOCK = threading.Lock()
