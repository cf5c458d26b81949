"""Every colour the viewer draws with, by name, taken from the Textual theme.

The widgets here draw Rich segments and text themselves (the timeline, tables, charts), so
their colours cannot come from CSS rules alone. Each colour has a name (`cursor`, `gap`,
`slot-kernel`, ...) and is a theme variable `$ks-<name>`:

- The app's `get_theme_variable_defaults` returns `variables_for(theme)`: in the default theme
  (textual-dark) the colours the viewer was designed with, in any other theme colours derived
  from that theme's own (its primary, success, warning, error, foreground and background),
  adjusted so that text stays readable on its background.
- A theme may set any `ks-<name>` in its `variables` to override one colour.
- Widgets read the current colours with `palette_of(widget)`: a `Palette` built from
  `app.theme_variables`, so a theme change (ctrl+p, `App.theme`) gives a new palette. Widgets
  that cache drawn strips clear those caches in a `recolour()` method, which the app calls on
  every widget and screen when the theme changes; text drawn once is drawn again there.
- NO_COLOR needs nothing here: Textual's monochrome filter greys every segment's colours.

No other module in the viewer writes a colour value; a test keeps it so.
"""

from __future__ import annotations

import colorsys
from collections.abc import Mapping
from typing import Any
from weakref import WeakKeyDictionary

from rich.style import Style
from textual.color import Color, ColorParseError
from textual.theme import Theme

PREFIX = "ks-"
DEFAULT_THEME = "textual-dark"

# The timeline's slice colours, in the order of viewdata's SLOT_* constants.
SLOT_NAMES = (
    "slot-other",
    "slot-kernel",
    "slot-memcpy",
    "slot-memset",
    "slot-runtime",
    "slot-operator",
    "slot-annotation",
    "slot-python",
    "slot-gpu-annotation",
    "slot-communication",
    "slot-sync",
)

# The colours of the default theme (textual-dark), by name; the names are the palette's.
DESIGNED: dict[str, str] = {
    # Slices: backgrounds of full cells (with `slot-text` on them), foregrounds of shaded ones.
    "slot-other": "#5c6370",
    "slot-kernel": "#2f8f4e",
    "slot-memcpy": "#b5892b",
    "slot-memset": "#b0652a",
    "slot-runtime": "#7d56b3",
    "slot-operator": "#3868a8",
    "slot-annotation": "#1f8a8a",
    "slot-python": "#566275",
    "slot-gpu-annotation": "#2b6f6f",
    "slot-communication": "#b8434b",
    "slot-sync": "#d63d8f",  # stands out from the purple of ordinary runtime calls
    "slot-text": "#f0f0f0",  # names written over full cells
    "selected": "#f2f2f2",  # the selected slice's background
    "selected-text": "#101010",
    "cursor": "#e5c07b",  # the time cursor
    "marked": "#e5c07b",  # the marked range (m)
    "heading": "#e5c07b",  # names in titles and details, table headers
    "ink": "#101010",  # text on a cursor, marked or heading background
    "gap": "#4a2326",  # the current idle gap's shading
    "current-row": "#262a30",  # the background of the cursor's lane
    "label": "#c8ccd4",  # lane labels
    "cpu": "#61afef",  # CPU group headers
    "gpu": "#98c379",  # GPU group headers, kernel names
    "muted": "#8b919a",  # the ruler, keys in details, axes
    "rule": "#4b5263",  # separators
    "cell": "#d0d4da",  # table cells
    "zebra": "#23272e",  # every other table row's background
    "table-cursor": "#61afef",
    "table-cursor-dim": "#3a4150",  # the table cursor while the table has no focus
    "match": "#d7a0ff",  # search matches on the timeline
    "error": "#e06c75",  # critical findings, gaps, peaks, sync totals
    "warning": "#e5c07b",
    "info": "#61afef",
    "allocated": "#56b6c2",  # memory allocated
    "reserved": "#243038",  # memory reserved (a background)
    "memory-cursor": "#4b4224",  # the memory chart's cursor column (a background)
    "idle": "#3a3f4b",  # idle time in the overview's bars
    "compiled": "#c678dd",  # torch.compile'd regions (the timeline's band, the compile view)
    # Parts of a whole (an operator's self time and its children), in order.
    "part-self": "#61afef",
    "part-1": "#98c379",
    "part-2": "#e5c07b",
    "part-3": "#c678dd",
    "part-4": "#56b6c2",
    "part-5": "#d19a66",
    "part-6": "#e06c75",
    "part-other": "#5c6370",
}
NAMES = tuple(DESIGNED)
PART_NAMES = ("part-1", "part-2", "part-3", "part-4", "part-5", "part-6")


def variable(name: str) -> str:
    """The theme variable of a named colour (without the `$`)."""
    return PREFIX + name


# -- colours of any other theme ----------------------------------------------------------------


def _hls(colour: Color) -> tuple[float, float, float]:
    return colorsys.rgb_to_hls(colour.r / 255, colour.g / 255, colour.b / 255)


def _from_hls(h: float, lightness: float, s: float) -> Color:
    r, g, b = colorsys.hls_to_rgb(h % 1.0, min(max(lightness, 0.0), 1.0), min(max(s, 0.0), 1.0))
    return Color(round(r * 255), round(g * 255), round(b * 255))


def _shift(colour: Color, degrees: float) -> Color:
    """The colour with its hue turned by `degrees`."""
    h, lightness, s = _hls(colour)
    return _from_hls(h + degrees / 360, lightness, s)


def _fill(colour: Color) -> Color:
    """The colour as a slice's fill: dark enough to carry light text, never garish."""
    h, lightness, s = _hls(colour)
    return _from_hls(h, min(max(lightness, 0.28), 0.38), min(s, 0.6))


def _ink(colour: Color, dark: bool) -> Color:
    """The colour as text on the theme's background: light on dark themes, dark on light."""
    h, lightness, s = _hls(colour)
    if dark:
        return _from_hls(h, max(lightness, 0.62), s)
    return _from_hls(h, min(lightness, 0.34), s)


def _base(value: str | None, fallback: str) -> Color:
    """A theme colour, opaque; `fallback` where the theme leaves it to the terminal."""
    try:
        colour = Color.parse(value) if value else Color.parse(fallback)
    except ColorParseError:
        colour = Color.parse(fallback)
    if colour.ansi == -1:  # the terminal's default colour: unknown here
        colour = Color.parse(fallback)
    return Color(colour.r, colour.g, colour.b)


def derived(theme: Theme) -> dict[str, str]:
    """The named colours for `theme`, from its own colours."""
    base = theme.to_color_system().generate()
    dark = theme.dark
    bg = _base(base.get("background"), "#121212" if dark else "#efefef")
    fg = _base(base.get("foreground"), "#e0e0e0" if dark else "#1f1f1f")
    primary = _base(base.get("primary"), "#0178d4")
    success = _base(base.get("success"), "#4ebf71")
    warning = _base(base.get("warning"), "#ffa62b")
    error = _base(base.get("error"), "#ba3c5b")
    accent = _base(base.get("accent"), "#ffa62b")

    def mix(a: Color, b: Color, amount: float) -> Color:
        return a.blend(b, amount)

    def ink(colour: Color) -> Color:
        return _ink(colour, dark)

    grey = mix(bg, fg, 0.45)
    annotation = _fill(_shift(success, 50))
    cursor = ink(warning)
    colours = {
        "slot-other": _fill(grey),
        "slot-kernel": _fill(success),
        "slot-memcpy": _fill(warning),
        "slot-memset": _fill(mix(warning, error, 0.5)),
        "slot-runtime": _fill(_shift(primary, 45)),
        "slot-operator": _fill(primary),
        "slot-annotation": annotation,
        "slot-python": _fill(mix(grey, primary, 0.2)),
        "slot-gpu-annotation": _fill(mix(annotation, grey, 0.35)),
        "slot-communication": _fill(error),
        "slot-sync": _fill(_shift(error, -25)),
        "slot-text": mix(fg if dark else bg, Color(255, 255, 255), 0.6),
        "selected": fg,
        "selected-text": bg,
        "cursor": cursor,
        "marked": cursor,
        "heading": ink(accent),
        "ink": bg,
        "gap": mix(bg, error, 0.3),
        "current-row": mix(bg, fg, 0.08),
        "label": mix(bg, fg, 0.85),
        "cpu": ink(primary),
        "gpu": ink(success),
        "muted": mix(bg, fg, 0.65),
        "rule": mix(bg, fg, 0.3),
        "cell": mix(bg, fg, 0.88),
        "zebra": mix(bg, fg, 0.05),
        "table-cursor": ink(primary),
        "table-cursor-dim": mix(bg, primary, 0.3),
        "match": ink(_shift(primary, 60)),
        "error": ink(error),
        "warning": cursor,
        "info": ink(primary),
        "allocated": ink(_shift(success, 50)),
        "reserved": mix(bg, primary, 0.15),
        "memory-cursor": mix(bg, warning, 0.3),
        "idle": mix(bg, fg, 0.2),
        "compiled": ink(_shift(primary, 90)),
        "part-self": ink(primary),
        "part-1": ink(success),
        "part-2": ink(warning),
        "part-3": ink(_shift(primary, 60)),
        "part-4": ink(_shift(success, 50)),
        "part-5": ink(mix(warning, error, 0.5)),
        "part-6": ink(error),
        "part-other": mix(bg, fg, 0.45),
    }
    return {name: colour.hex.lower() for name, colour in colours.items()}


def variables_for(theme: Theme) -> dict[str, str]:
    """The `ks-*` theme variables' defaults in `theme` (for `App.get_theme_variable_defaults`)."""
    colours = DESIGNED if theme.name == DEFAULT_THEME else derived(theme)
    return {variable(name): value for name, value in colours.items()}


# -- palettes --------------------------------------------------------------------------------


class Palette:
    """The named colours of one theme, as Rich colour strings, and styles made of them."""

    def __init__(self, colours: Mapping[str, str]) -> None:
        self._colours = {name: colours.get(name, DESIGNED[name]) for name in NAMES}
        self._key = tuple(self._colours.values())
        self._hash = hash(self._key)
        self._styles: dict[tuple, Style] = {}
        self.slots: tuple[str, ...] = tuple(self._colours[name] for name in SLOT_NAMES)
        self.parts: tuple[str, ...] = tuple(self._colours[name] for name in PART_NAMES)

    def __getitem__(self, name: str) -> str:
        return self._colours[name]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Palette) and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Palette({self._colours!r})"

    def style(
        self,
        color: str | None = None,
        bgcolor: str | None = None,
        *,
        bold: bool = False,
        reverse: bool = False,
    ) -> Style:
        """A style of the named colours `color` (text) and `bgcolor` (background)."""
        key = (color, bgcolor, bold, reverse)
        style = self._styles.get(key)
        if style is None:
            style = Style(
                color=self._colours[color] if color else None,
                bgcolor=self._colours[bgcolor] if bgcolor else None,
                bold=bold or None,
                reverse=reverse or None,
            )
            self._styles[key] = style
        return style


DEFAULT = Palette(DESIGNED)


def _rich_colour(value: str, background: Color) -> str | None:
    """A theme variable's value as a Rich colour string (translucent ones laid on the
    background; ANSI ones kept as the terminal's colour)."""
    try:
        colour = Color.parse(value)
    except ColorParseError:
        return None
    if colour.ansi is not None:
        name = value.strip()
        return name[len("ansi_") :] if name.startswith("ansi_") else None
    if colour.a < 1:
        colour = background.blend(colour.with_alpha(1.0), colour.a)
    return colour.hex.lower()


def palette_from_variables(variables: Mapping[str, str]) -> Palette:
    """The palette in theme variables (`app.theme_variables`); a missing or unreadable one
    takes the default theme's colour."""
    try:
        background = Color.parse(variables.get("background", "#121212"))
    except ColorParseError:
        background = Color.parse("#121212")
    colours: dict[str, str] = {}
    for name in NAMES:
        value = variables.get(variable(name))
        rich = _rich_colour(value, background) if value else None
        colours[name] = rich if rich is not None else DESIGNED[name]
    return Palette(colours)


_palettes: WeakKeyDictionary[Any, tuple[dict, Palette]] = WeakKeyDictionary()


def palette_of(node: Any) -> Palette:
    """The palette of the app `node` (a widget, screen or the app) runs in; the default theme's
    outside an app."""
    if hasattr(node, "theme_variables"):
        app = node
    else:
        try:
            app = node.app
        except Exception:  # not running in an app (tests drawing a widget by hand)
            return DEFAULT
    variables = getattr(app, "theme_variables", None)
    if not variables:
        return DEFAULT
    cached = _palettes.get(app)
    if cached is not None and cached[0] is variables:
        return cached[1]
    palette = palette_from_variables(variables)
    if cached is not None and cached[1] == palette:
        palette = cached[1]  # the same colours: keep the object (and its styles)
    _palettes[app] = (variables, palette)
    return palette


def current_palette() -> Palette:
    """The palette of the app running now (for code that draws outside a widget's methods,
    such as a table column's bar); the default theme's outside an app."""
    try:
        from textual._context import active_app

        app = active_app.get()
    except (ImportError, LookupError):
        return DEFAULT
    return palette_of(app)
