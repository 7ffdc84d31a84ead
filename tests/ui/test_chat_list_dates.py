"""The chats list's dates for chats stamped while the clock was far off (see tests/storage/test_clock.py)."""

from __future__ import annotations

import time

from vrampilot.ui.chat.chat_list import _when


def test_a_chat_stamped_at_another_time_shows_its_year() -> None:
    assert ":" in _when(time.time())  # today: the time
    assert _when(4102444800.0).endswith("2100")  # 1 Jan 2100: not "00:00", as if today
    assert _when(31536000.0).endswith("1971")
