"""The one exception the client raises."""

from __future__ import annotations

import json
from typing import Any

import httpx


class MnemoError(Exception):
    """A request that failed: the service's problem (RFC 9457) or a transport failure.

    ``status`` is the HTTP status (0 when no answer arrived: connection refused, timeout, ...);
    ``title``, ``detail``, ``type``, ``field`` (the JSON path or parameter a 422 names) and
    ``request_id`` come from the problem body; ``problem`` is the whole body as parsed (extension
    members such as ``current_version`` or ``headings`` included) and ``body`` the raw text.
    """

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        type: str | None = None,
        field: str | None = None,
        request_id: str | None = None,
        problem: dict[str, Any] | None = None,
        body: str = "",
        headers: httpx.Headers | None = None,
    ) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.field = field
        self.request_id = request_id
        self.problem: dict[str, Any] = problem or {}
        self.body = body
        self.headers = headers if headers is not None else httpx.Headers()
        where = f" (field {field})" if field else ""
        rid = f" [request {request_id}]" if request_id else ""
        super().__init__(f"{status} {title}: {detail}{where}{rid}")

    @classmethod
    def from_response(cls, response: httpx.Response) -> MnemoError:
        text = response.text
        problem: dict[str, Any] = {}
        try:
            parsed = json.loads(text) if text else {}
            if isinstance(parsed, dict):
                problem = parsed
        except ValueError:
            pass
        field = problem.get("field")
        return cls(
            response.status_code,
            str(problem.get("title") or response.reason_phrase or "error"),
            str(problem.get("detail") or text[:500]),
            type=problem.get("type"),
            field=field if isinstance(field, str) else None,
            request_id=problem.get("request_id") or response.headers.get("x-request-id"),
            problem=problem,
            body=text,
            headers=response.headers,
        )

    @classmethod
    def from_transport(cls, error: httpx.TransportError) -> MnemoError:
        return cls(0, type(error).__name__, str(error) or repr(error))
