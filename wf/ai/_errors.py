"""Provider errors, sorted into what wf retries and what fails the step at once.

A model request runs in a wf step, so wf's step rules decide what happens when the provider
answers with an error. Pydantic AI already classifies them (``ModelRateLimitError``,
``ModelServerError``, ``ModelAuthenticationError``, ...) and parses ``Retry-After`` /
``retry-after-ms`` into ``retry_after``; this module only translates that classification:

- rate limits, overload, 5xx, timeouts and lost connections are transient:
  ``wf.RetryableError(after=retry_after)``, so the step's backoff waits as long as the provider
  asked, at most the step's ``max_backoff`` (a provider's header is not trusted with a wait of
  years), as a durable timer: the run may suspend and resume elsewhere meanwhile;
- a rejected request (invalid API key, unknown model, context window exceeded, any other 4xx) or
  an exhausted quota will fail the same way every time: ``wf.FatalError`` with the provider's
  message, so the run fails at once instead of retrying a request that cannot succeed.

The original error stays chained as ``__cause__`` while the step runs.
"""

from __future__ import annotations

from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
)

from wf._exceptions import FatalError, RetryableError

_TRANSIENT = (
    ModelRateLimitError,
    ModelUnavailableError,
    ModelServerError,
    ModelConnectionError,
    ModelRequestTimeout,
)
_PERMANENT = (ModelRequestRejectedError, ModelQuotaExceededError)


def _message(error: ModelAPIError) -> str:
    status = getattr(error, "status_code", None)
    text = str(error)
    return f"{type(error).__name__} (HTTP {status}): {text}" if status else text


def _after(error: ModelAPIError, max_wait: float) -> float | None:
    asked = error.retry_after
    return None if asked is None else min(asked, max_wait)


def provider_error(error: ModelAPIError, max_wait: float = 30.0) -> Exception:
    """The wf error a provider error becomes inside a model step (see the module docstring).

    ``max_wait``: the longest retry delay taken from the provider (the step's ``max_backoff``).
    """
    if isinstance(error, _TRANSIENT):
        return RetryableError(_message(error), after=_after(error, max_wait))
    if isinstance(error, _PERMANENT):
        return FatalError(_message(error))
    if isinstance(error, ModelHTTPError):  # an HTTP error Pydantic AI did not categorise
        status = error.status_code
        if status in (408, 409, 425, 429) or status >= 500:
            return RetryableError(_message(error), after=_after(error, max_wait))
        if 400 <= status < 500:
            return FatalError(_message(error))
    return RetryableError(_message(error), after=_after(error, max_wait))
