"""The `001` API response envelopes: `{"status": "success", ...}` and `{"status": "error", ...}`.

`SuccessResponse[T]` types its `data` (`SuccessResponse[Task]`); bare `SuccessResponse` takes
any JSON. `ApiResponse` is either envelope, told apart by `status`; `ApiResponseAdapter` parses
one.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import Field, TypeAdapter

from models.base import SnakeWireModel
from models.wire_support import tag_error_at

DataT = TypeVar("DataT")


class SuccessResponse(SnakeWireModel, Generic[DataT]):
    """`001` Success Response: the operation worked; `data` is its result."""

    status: Literal["success"] = "success"
    data: DataT | None = Field(default=None, description="The result of the operation")
    message: str | None = Field(default=None, description='e.g. "Operation completed"')


class ErrorResponse(SnakeWireModel):
    """`001` Error Response: the operation failed, with the error's kind and details."""

    status: Literal["error"] = "error"
    error: str = Field(min_length=1, description='The kind of error, e.g. "ValidationError"')
    message: str = Field(description="What went wrong, for a person")
    details: dict[str, Any] | None = Field(default=None, description="e.g. the fields at fault")


ApiResponse = Annotated[
    SuccessResponse[Any] | ErrorResponse, Field(discriminator="status"), tag_error_at("status")
]
"""Either `001` API envelope, told apart by `status`."""

ApiResponseAdapter: TypeAdapter[ApiResponse] = TypeAdapter(ApiResponse)
