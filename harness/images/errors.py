"""The images floor's error root, in a module of its own so that every module of the floor
(:mod:`.cache`, :mod:`.lock`, the builders) imports it without importing another."""

from __future__ import annotations

from ..errors import HarnessError

__all__ = ["ImageError"]


class ImageError(HarnessError):
    """Fetching or building an image failed; the message names the step and its input."""
