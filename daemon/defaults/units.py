"""The units the defaults are written in, where seconds would hide the span they mean."""

from __future__ import annotations

from typing import Final

#: Durations of days (decay, grace periods, windows, retention) are written in these.
DAY_S: Final = 86_400.0
