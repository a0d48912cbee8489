"""A small HTML and SVG writer for the pages grading writes (a student's feedback.html, a class's index.html).

Every page is one self-contained file: no script, no address outside the file, its one stylesheet inline
and allowed by its hash in a Content-Security-Policy of `default-src 'none'`, so a page opened from a
student's folder fetches nothing and runs nothing, whatever a student's message holds. Text is escaped
where it is placed (`text`), so nothing from a submission can become markup. The same report gives the
same bytes: nothing here reads a clock or a random number.
"""

from __future__ import annotations

import base64
import hashlib
import html
from importlib import resources

from grader.reports.text import printable


class Markup(str):
    """HTML that is already safe to place: built here, never taken from a submission."""


def text(value: object) -> Markup:
    """Any value as HTML text: escaped, quotes included, and without what XML cannot hold."""
    return Markup(html.escape(printable(str(value)), quote=True))


def _children(children) -> str:
    parts = []
    for child in children:
        if child is None or child is False:
            continue
        if isinstance(child, (list, tuple)):
            parts.append(_children(child))
        elif isinstance(child, Markup):
            parts.append(child)
        else:
            parts.append(text(child))
    return "".join(parts)


def _attribute(name: str, value: object) -> str:
    name = name.rstrip("_").replace("_", "-")  # class_ -> class, data_devices -> data-devices
    if value is True:
        return f" {name}"
    return f' {name}="{text(value)}"'


VOID = frozenset({"meta", "br", "hr", "img", "link", "input", "col"})
# written self-closed: "<rect .../>" (allowed in SVG)
SVG_EMPTY = frozenset({"rect", "line", "circle", "path"})


def element(tag: str, *children, **attributes) -> Markup:
    """<tag attributes>children</tag>; attributes that are None or False are left out."""
    attrs = "".join(
        _attribute(name, value)
        for name, value in attributes.items()
        if value is not None and value is not False
    )
    if tag in VOID:
        return Markup(f"<{tag}{attrs}>")
    if tag in SVG_EMPTY and not children:
        return Markup(f"<{tag}{attrs}/>")
    return Markup(f"<{tag}{attrs}>{_children(children)}</{tag}>")


def number(value: float, digits: int = 2) -> str:
    """A figure for an SVG attribute: rounded, so the same report gives the same bytes."""
    rounded = round(float(value), digits)
    return (
        f"{rounded:.{digits}f}".rstrip("0").rstrip(".")
        if rounded != int(rounded)
        else str(int(rounded))
    )


def stylesheet() -> str:
    return resources.files("grader.reports").joinpath("page.css").read_text(encoding="utf-8")


def content_security_policy(css: str) -> str:
    """Nothing but the page's own stylesheet: no script, no request, no frame, no form."""
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    return f"default-src 'none'; style-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"


def document(title: str, *body) -> str:
    """A whole page: the CSP, the stylesheet, and `body`."""
    css = stylesheet()
    head = element(
        "head",
        element("meta", charset="utf-8"),
        element("meta", http_equiv="Content-Security-Policy", content=content_security_policy(css)),
        element("meta", name="viewport", content="width=device-width, initial-scale=1"),
        element("meta", name="referrer", content="no-referrer"),
        element("title", title),
        Markup(f"<style>{css}</style>"),
    )
    return "<!DOCTYPE html>\n" + element("html", head, element("body", *body), lang="en") + "\n"
