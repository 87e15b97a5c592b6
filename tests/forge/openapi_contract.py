"""GitHub's REST contract for the test suite: the official OpenAPI description, loaded once, checked per call.

The description is the npm package ``@octokit/openapi`` pinned in ``package.json`` (file
``generated/api.github.com.json``), loaded with openapi-core *without* validating the 13 MB document itself
(``spec_validator_cls=None``; validating it takes over a minute, loading without it well under a second, so no
cached subset is needed).

``Contract`` finds the operation of a request, validates the request against it, and validates a response against
that operation's schema for the status code. Where the description is stricter than github.com, the difference is
handled here, explicitly and narrowly, and each case says why:

1. **Labels as a bare array.** ``POST /repos/{owner}/{repo}/issues/{issue_number}/labels`` (``issues/add-labels``)
   and ``PUT …/labels`` (``issues/set-labels``): the schema allows only ``{"labels": [...]}``, yet its own
   description says "You can also pass an ``array`` of labels directly", GitHub accepts it, and PyGithub's
   ``add_to_labels`` / ``set_labels`` send exactly that. A bare JSON array of strings is re-wrapped as
   ``{"labels": [...]}`` and *then* validated; anything else (a bare array elsewhere, an array of numbers) is still
   a violation.
2. **Slashes in ``{ref}`` and ``{path}``.** In OpenAPI a path parameter is one segment, so
   ``/git/ref/heads/main`` or ``/contents/recipes/a.yaml`` match no template, while GitHub takes the rest of the
   path as the ref or file path (and PyGithub sends them unescaped). Parameters named ``ref`` or ``path`` may
   span segments; for validation their value is percent-encoded into one segment.
3. **Error statuses GitHub sends but the operation does not document** (listed in ``UNDOCUMENTED_ERRORS``): such a
   body is checked against the spec's generic ``basic-error`` schema instead of the operation's responses.
4. **Ambiguous responses** (``AMBIGUOUS_RESPONSES``): a documented ``oneOf`` that every object satisfies twice is
   checked against its basic-error branch.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openapi_core import Config, OpenAPI
from openapi_core.datatypes import RequestParameters
from openapi_core.exceptions import OpenAPIError
from werkzeug.datastructures import Headers, ImmutableMultiDict

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_PACKAGE = "@octokit/openapi"
SPEC_FILE = REPO_ROOT / "node_modules" / SPEC_PACKAGE / "generated" / "api.github.com.json"
API_HOST = "https://api.github.com"
METHODS = ("get", "put", "post", "delete", "patch", "head")
MULTI_SEGMENT_PARAMS = frozenset({"ref", "path"})
LABEL_OPERATIONS = frozenset({"issues/add-labels", "issues/set-labels"})

# (operationId, status): why GitHub sends it although the operation does not document it.
# Responses whose documented schema is a ``oneOf`` of object schemas without required or excluded properties: every
# body fits all branches, so no body can pass a strict ``oneOf``. Such a body is checked against its basic-error branch.
AMBIGUOUS_RESPONSES: dict[tuple[str, int], str] = {
    (
        "repos/create-or-update-file-contents",
        409,
    ): "oneOf basic-error | repository-rule-violation-error: both admit any object "
    "(github.com answers a basic-error: the file's sha does not match)",
}

UNDOCUMENTED_ERRORS: dict[tuple[str, int], str] = {
    (
        "repos/create-commit-status",
        422,
    ): "github.com answers 422 'No commit found for SHA' for an unknown sha",
    ("actions/create-workflow-dispatch", 404): "github.com answers 404 for an unknown workflow file",
    (
        "actions/create-workflow-dispatch",
        422,
    ): "github.com answers 422 for an unknown ref or undeclared input",
}


class ContractViolation(AssertionError):
    """A request or response outside GitHub's published contract."""


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    operation_id: str
    pattern: re.Pattern[str]
    params: tuple[str, ...]
    literal_chars: int


@dataclass(frozen=True)
class Match:
    route: Route
    params: dict[str, str]  # decoded values

    @property
    def operation_id(self) -> str:
        return self.route.operation_id

    def spec_path(self) -> str:
        """The request path with every parameter percent-encoded into one segment (what the spec can match)."""
        path = self.route.template
        for name in self.route.params:
            path = path.replace("{" + name + "}", urllib.parse.quote(self.params[name], safe=""))
        return path


@dataclass
class SpecRequest:
    """openapi-core's Request protocol for one call."""

    path: str
    method: str
    parameters: RequestParameters
    body: bytes | None
    content_type: str
    host_url: str = API_HOST


@dataclass
class SpecResponse:
    """openapi-core's Response protocol for one answer."""

    status_code: int
    data: bytes | None
    content_type: str
    headers: Headers


def spec_missing_reason() -> str | None:
    """Why the contract cannot be loaded here, or None when it can."""
    if SPEC_FILE.is_file():
        return None
    return (
        f"{SPEC_FILE.relative_to(REPO_ROOT)} is missing: run `npm ci --ignore-scripts --no-audit --no-fund` "
        "at the repository root (package.json pins the GitHub contract)"
    )


def _compile(template: str) -> tuple[re.Pattern[str], tuple[str, ...], int]:
    names: list[str] = []
    regex = ""
    literal = 0
    for piece in re.split(r"(\{[^}]+\})", template):
        if piece.startswith("{"):
            name = piece[1:-1]
            names.append(name)
            regex += "(.+?)" if name in MULTI_SEGMENT_PARAMS else "([^/]+)"
        else:
            regex += re.escape(piece)
            literal += len(piece)
    return re.compile(f"^{regex}$"), tuple(names), literal


def _errors_text(exc: BaseException) -> str:
    """The schema errors behind an openapi-core exception, one per line."""
    lines = [f"{type(exc).__name__}: {str(exc)[:200]}"]
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for err in getattr(exc, "schema_errors", ()) or ():
            where = "/".join(str(p) for p in err.absolute_path) or "(root)"
            lines.append(f"  at {where}: {err.message[:300]}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(lines)


class Contract:
    """GitHub's REST description, with operation lookup and request/response validation."""

    def __init__(self, path: Path = SPEC_FILE) -> None:
        started = time.perf_counter()
        raw = json.loads(path.read_bytes())
        self.version: str = raw["info"]["version"]
        self.examples: dict[str, Any] = raw["components"]["examples"]
        self.schemas: dict[str, Any] = raw["components"]["schemas"]
        self.api = OpenAPI.from_dict(raw, config=Config(spec_validator_cls=None))
        self.documented: dict[str, set[int]] = {}
        routes: list[Route] = []
        for template, item in raw["paths"].items():
            pattern, names, literal = _compile(template)
            for method in METHODS:
                op = item.get(method)
                if op is None:
                    continue
                routes.append(Route(method, template, op["operationId"], pattern, names, literal))
                self.documented[op["operationId"]] = {int(s) for s in op["responses"] if s.isdigit()}
        # Most literal characters first, so /git/ref/{ref} wins over a template with more parameters.
        self.routes = sorted(routes, key=lambda r: -r.literal_chars)
        self.load_seconds = time.perf_counter() - started

    def example(self, name: str) -> Any:
        return json.loads(json.dumps(self.examples[name]["value"]))

    def match(self, method: str, raw_path: str) -> Match | None:
        """The operation for ``method`` on ``raw_path`` (as sent, percent-encoded), or None."""
        path = urllib.parse.unquote(raw_path)
        for route in self.routes:
            if route.method != method.lower():
                continue
            found = route.pattern.match(path)
            if found:
                return Match(route, dict(zip(route.params, found.groups(), strict=True)))
        return None

    @staticmethod
    def normalise_body(match: Match, body: Any) -> Any:
        """Allowance 1 (see the module docstring): a bare array of label names becomes ``{"labels": [...]}``."""
        if (
            match.operation_id in LABEL_OPERATIONS
            and isinstance(body, list)
            and body
            and all(isinstance(x, str) for x in body)
        ):
            return {"labels": body}
        return body

    def _request(self, match: Match, query: dict[str, list[str]], body: Any, content_type: str) -> SpecRequest:
        data = None if body is None else json.dumps(body).encode()
        return SpecRequest(
            path=match.spec_path(),
            method=match.route.method,
            parameters=RequestParameters(
                query=ImmutableMultiDict([(k, v) for k, vs in query.items() for v in vs]),
                header=Headers({"Content-Type": content_type} if content_type else {}),
            ),
            body=data,
            content_type=content_type if data is not None else "",
        )

    def check_request(self, match: Match, query: dict[str, list[str]], body: Any, content_type: str) -> None:
        """Raise ``ContractViolation`` unless the request fits its operation."""
        request = self._request(match, query, self.normalise_body(match, body), content_type)
        try:
            self.api.validate_request(request)
        except OpenAPIError as exc:
            raise ContractViolation(
                f"request {match.route.method.upper()} {match.route.template} ({match.operation_id}) "
                f"breaks GitHub's contract:\n{_errors_text(exc)}"
            ) from exc

    def check_response(self, match: Match, query: dict[str, list[str]], status: int, payload: Any) -> None:
        """Raise ``ContractViolation`` unless ``payload`` fits the operation's schema for ``status``."""
        op = match.operation_id
        if status not in self.documented.get(op, set()):
            if (op, status) not in UNDOCUMENTED_ERRORS:
                raise ContractViolation(f"{op} does not document status {status}")
            if not (isinstance(payload, dict) and isinstance(payload.get("message"), str)):
                raise ContractViolation(f"{op} {status}: error body must be a basic-error with a message")
            return
        if (op, status) in AMBIGUOUS_RESPONSES:
            if not (
                isinstance(payload, dict)
                and isinstance(payload.get("message"), str)
                and all(isinstance(payload.get(k, ""), str) for k in ("documentation_url", "url", "status"))
            ):
                raise ContractViolation(f"{op} {status}: the body must be a basic-error with a message")
            return
        request = self._request(match, query, None, "")
        data = None if payload is None else json.dumps(payload).encode()
        response = SpecResponse(
            status_code=status,
            data=data,
            content_type="application/json" if data is not None else "",
            headers=Headers(),
        )
        try:
            self.api.validate_response(request, response)
        except OpenAPIError as exc:
            raise ContractViolation(
                f"response {status} of {op} breaks GitHub's contract:\n{_errors_text(exc)}"
            ) from exc
