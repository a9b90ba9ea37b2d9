"""The MCP tools: each a few lines over the same use case as its ``/v1`` route.

Guarantees:
- The caller is the principal the door admitted (``request.state.principal``);
  no tool takes an identity, tenant or agent from its arguments.
- Each tool charges its rate-limit bucket as the REST route does (reads and
  beacons the Read bucket, writes the Write bucket, the inbox the Inbox
  bucket) before it does any work.
- A refusal is a tool error whose text starts with the spec's error code
  (``validation: k must be between 1 and 1000``), so an agent can branch on
  it; the service's state is unchanged by a refused call.
- ``recall`` and ``query`` return only ``{node_id, distance}`` per hit, in
  rank order (spec section 4); ``get_cell`` reads a hit's cell (without its
  vector); ``consolidate_scene`` is not a tool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import wraps
from typing import Annotated, Any, ParamSpec, TypeVar, cast

from jsonschema import Draft202012Validator
from mcp.server import MCPServer
from mcp.server.context import HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.subscriptions import SubscriptionBus
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from api.cursors import decode_cursor, encode_cursor
from api.data.schemas import INT32_MAX, INT64_MAX
from api.errors import describe
from api.ids import Id
from api.mcp.coded_errors import coded_errors
from api.mcp.push import InboxWatches, add_inbox_resource, protocol_error, push_middleware
from head.facade import Bucket, Memesh
from mesh.errors import MemeshError, RateLimited, Unauthorized
from mesh.identity import Principal
from mesh.inbox_wire import pull_page
from mesh.model import Cell, CellType, Layer, NewCell
from mesh.query import NodeFilter
from mesh.times import rfc3339
from mesh.tuning import Ranking

P = ParamSpec("P")
R = TypeVar("R")

INSTRUCTIONS = (
    "memesh is this agent's shared memory. Call `recall` before you decide something, with what you are "
    "about to do, to find what agents of your tenant already know; `write_cell` to keep a decision, "
    "constraint, risk, lesson or fact worth remembering; `place_beacon` with a standing interest and "
    "`pull_inbox` to receive new knowledge other agents write about it."
)
DISTANCE = "cosine distance between the query and the cell's vector (1 - cosine similarity): 0 is identical, 2 opposite"


RANKING = "ranking `hybrid` (default) fuses similarity with BM25 keyword matching; `dense` ranks by similarity alone"
RECALL = (
    "Cells that matter for `text`: relevance blended with salience and recency, in rank order. "
    f"{RANKING}. distance: {DISTANCE}; the order is the rank, so it need not follow distance."
)
QUERY = (
    f"Cells most relevant to `text`, in rank order. {RANKING} (then nearest first). "
    f"distance: {DISTANCE}; a hybrid order need not follow distance."
)
PULL = (
    "Drain your inbox: deliveries after your cursor, best first; `ack` the largest sequence you handled "
    "to move the cursor. Embeddings are left out unless asked for."
)


class Hit(BaseModel):
    node_id: str = Field(description="The cell's id.")
    distance: float = Field(description=DISTANCE)


class Written(BaseModel):
    node_id: str
    scene_id: str | None = Field(description="The scene the cell joined.")


class SessionOpened(BaseModel):
    session_id: str


class BeaconPlaced(BaseModel):
    node_id: str


class Ok(BaseModel):
    ok: bool = True


class SceneView(BaseModel):
    id: str
    project_id: str
    summary: str
    members: list[str] = Field(description="The member cells' ids (live and superseded).")
    member_count: int = Field(description="Live member cells.")


class CellView(BaseModel):
    """A cell as an agent reads it (REST's node without the vector)."""

    id: str
    content: str
    cell_type: CellType
    project_id: str
    layer: Layer
    salience: float
    source_agent: str
    created_at: str
    scene_id: str | None
    superseded_by: str | None = Field(description="The Pattern that abstracted this cell; null while it is live.")

    @classmethod
    def of(cls, cell: Cell) -> CellView:
        return cls(
            id=cell.id,
            content=cell.content,
            cell_type=cell.cell_type,
            project_id=cell.project_id,
            layer=cell.layer,
            salience=round(float(cell.salience), 6),
            source_agent=cell.source_agent,
            created_at=rfc3339(cell.created_at),
            scene_id=cell.scene_id,
            superseded_by=cell.superseded_by,
        )


class CellPage(BaseModel):
    cells: list[CellView]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


def _caller(ctx: Context) -> Principal:
    """The principal the door admitted for this HTTP request (never an argument of the tool)."""
    request = ctx.request_context.request
    if request is None:
        raise Unauthorized("MCP is served over HTTP only")
    principal: Principal = request.state.principal
    return principal


def _coded(tool: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A MemeshError becomes a tool error whose text starts with the spec code."""

    @wraps(tool)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await tool(*args, **kwargs)
        except MemeshError as exc:
            refusal = CallToolResult(content=[TextContent(type="text", text=f"{exc.code.value}: {exc.message}")], is_error=True)
            return cast(R, refusal)  # the SDK passes a CallToolResult through as the answer

    return run


def _filter(cell_types: list[CellType] | None, scene_id: str | None, source_agent: str | None, layer: Layer | None) -> NodeFilter:
    return NodeFilter(
        cell_types=frozenset(cell_types) if cell_types else None, scene_id=scene_id, source_agent=source_agent, layer=layer
    )


def _hits(hits: list[tuple[Cell, float]]) -> list[Hit]:
    return [Hit(node_id=cell.id, distance=round(1.0 - similarity, 6)) for cell, similarity in hits]


Search = Callable[
    [Principal, str | None, list[float] | None, int, NodeFilter, Ranking | None], Awaitable[list[tuple[Cell, float]]]
]
Text = Annotated[str, Field(min_length=1, description="What to look for, in words.")]
K = Annotated[int, Field(ge=1, description="How many hits at most (up to limits.max_k).")]
Types = Annotated[list[CellType] | None, Field(description="Only cells of these types.")]
RankingParam = Annotated[
    Ranking | None, Field(description="hybrid (default): similarity fused with BM25; dense: similarity alone.")
]


JSON_KINDS = {
    "integer": "a valid integer",
    "number": "a valid number",
    "string": "a valid string",
    "boolean": "a valid boolean",
    "array": "a valid list",
    "object": "a valid dictionary",
}


def _kinds(value: object) -> list[str]:
    return [str(kind) for kind in value] if isinstance(value, list) else [str(value)]


class MemeshMCPServer(MCPServer):
    """The SDK's server, with arguments that fail a tool's input schema refused as ``validation: ...``
    (the SDK's own text would be ``Error executing tool ...``) and an unknown tool as ``not_found: ...``,
    like every other refusal. Arguments are held to the schema strictly (an integer is an integer, not
    ``"3"`` or ``true``), as the A2A door and REST hold theirs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._type_checks: dict[str, Draft202012Validator] = {}  # tool name -> its input schema's validator

    def _mistyped(self, name: str, schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
        """The first argument whose JSON type is not its input schema's (``field: Input should be ...``), or
        None: the SDK's lax validation took ``k: "3"`` as 3 and ``k: true`` as 1. An integral number is an
        integer, as JSON Schema says; every other rule stays the SDK's validation's."""
        check = self._type_checks.get(name)
        if check is None:
            check = self._type_checks[name] = Draft202012Validator(schema)
        for error in check.iter_errors(arguments):
            alternatives = error.context if error.validator in ("anyOf", "oneOf") else [error]  # ``int | None``
            if alternatives and all(alternative.validator == "type" for alternative in alternatives):
                wanted = [kind for alternative in alternatives for kind in _kinds(alternative.validator_value) if kind != "null"]
                where = ".".join(str(part) for part in error.absolute_path) or "arguments"
                return f"{where}: Input should be {' or '.join(JSON_KINDS.get(str(kind), str(kind)) for kind in wanted)}"
        return None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tool = self._tool_manager.get_tool(name)
        if tool is None:  # the SDK's own text: "Unknown tool: ..."
            raise ToolError(f"not_found: no tool named {name[:200]!r}")
        mistyped = self._mistyped(name, tool.parameters, arguments)
        if mistyped is not None:
            raise ToolError(f"validation: {mistyped}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            raise ToolError(f"validation: {describe(exc.__cause__.errors())}") from exc.__cause__


SELF_CHARGED = frozenset({"tools/call", "resources/read"})  # each charges its own bucket (the tool's, the inbox's)


def _metered(memesh: Memesh) -> ServerMiddleware[Any]:
    """SDK middleware: every MCP message but a tool call costs its caller one Read token (a tool call
    costs its own bucket, in the tool), so ``initialize``, ``tools/list`` or ``ping`` cannot be sent
    without bound. An empty bucket refuses the request with ``rate_limited: ...`` and drops a notification."""

    async def metered(
        ctx: ServerRequestContext[Any, Any], call_next: Callable[[ServerRequestContext[Any, Any]], Awaitable[HandlerResult]]
    ) -> HandlerResult:
        request = ctx.request
        principal = getattr(request.state, "principal", None) if request is not None else None
        if ctx.method not in SELF_CHARGED and isinstance(principal, Principal):
            try:
                memesh.charge(principal, Bucket.READ)
            except RateLimited as exc:
                if ctx.request_id is None:
                    return None
                raise protocol_error(exc) from None
        return await call_next(ctx)

    return metered


def build_mcp_server(memesh: Memesh, bus: SubscriptionBus, watches: InboxWatches) -> MCPServer:
    """The tool set over ``memesh``'s use cases, its listen streams fed by ``bus`` (``watches`` publishes
    each agent's inbox updates there)."""
    server = MemeshMCPServer(
        "memesh",
        instructions=INSTRUCTIONS,
        middleware=[_metered(memesh), coded_errors(), push_middleware(memesh, watches)],
        subscriptions=bus,
    )
    add_inbox_resource(server, memesh)
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def search_tool(name: str, description: str, search: Search) -> None:
        """``recall`` and ``query`` take the same parameters and answer the same hits."""

        @server.tool(name=name, description=description, annotations=read_only)
        @_coded
        async def tool(
            ctx: Context,
            text: Text,
            k: K = 10,
            cell_types: Types = None,
            scene_id: Id | None = None,
            source_agent: str | None = None,
            layer: Layer | None = None,
            ranking: RankingParam = None,
        ) -> list[Hit]:
            principal = _caller(ctx)
            memesh.charge_read(principal, k)
            return _hits(await search(principal, text, None, k, _filter(cell_types, scene_id, source_agent, layer), ranking))

    search_tool("recall", RECALL, memesh.memory.recall_hits)
    search_tool("query", QUERY, memesh.memory.query_hits)

    @server.tool(description="Remember one unit of knowledge; it joins a scene and reaches agents whose interests it matches.")
    @_coded
    async def write_cell(
        ctx: Context,
        content: Annotated[str, Field(min_length=1)],
        cell_type: CellType,
        salience: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5,
        layer: Layer | None = None,
        project_id: str | None = None,
        session_id: Id | None = None,
        scene_id: Id | None = None,
    ) -> Written:
        principal = _caller(ctx)
        memesh.charge(principal, Bucket.WRITE)
        spec = NewCell(
            content=content,
            cell_type=cell_type,
            salience=salience,
            layer=layer,
            project_id=project_id,
            session_id=session_id,
            scene_id=scene_id,
        )
        (cell,) = await memesh.memory.write_cells(principal, [spec])
        return Written(node_id=cell.id, scene_id=cell.scene_id)

    @server.tool(description="Read one cell by id (the node_id `recall` and `query` return).", annotations=read_only)
    @_coded
    async def get_cell(ctx: Context, node_id: Id) -> CellView:
        principal = _caller(ctx)
        memesh.charge(principal, Bucket.READ)
        return CellView.of(await memesh.cells.get(principal, node_id))

    @server.tool(
        description="List your tenant's cells in creation order, a page at a time, filtered as `query` filters.",
        annotations=read_only,
    )
    @_coded
    async def list_cells(
        ctx: Context,
        project_id: str | None = None,
        cell_types: Types = None,
        layer: Layer | None = None,
        scene_id: Id | None = None,
        source_agent: str | None = None,
        include_superseded: bool = False,
        cursor: Annotated[str | None, Field(max_length=256)] = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
    ) -> CellPage:
        principal = _caller(ctx)
        memesh.charge_read(principal, limit)
        flt = replace(
            _filter(cell_types, scene_id, source_agent, layer),
            project_ids=frozenset({project_id}) if project_id is not None else None,
            include_superseded=include_superseded,
        )
        cells, more = await memesh.cells.list(principal, flt, decode_cursor(cursor), limit)
        next_cursor = encode_cursor(cells[-1].id) if more and cells else None
        return CellPage(cells=[CellView.of(c) for c in cells], next_cursor=next_cursor)

    @server.tool(
        description="Delete a cell you wrote: it leaves recall and query at once (admins may delete any cell of the tenant).",
        annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False),
    )
    @_coded
    async def delete_cell(ctx: Context, node_id: Id) -> Ok:
        principal = _caller(ctx)
        memesh.charge(principal, Bucket.WRITE)
        await memesh.cells.delete(principal, node_id)
        return Ok()

    @server.tool(description="Open a working session in a project; cells written with its id belong to it.")
    @_coded
    async def open_session(ctx: Context, project_id: Annotated[str, Field(min_length=1, max_length=128)]) -> SessionOpened:
        principal = _caller(ctx)
        memesh.charge(principal, Bucket.WRITE)
        return SessionOpened(session_id=(await memesh.memory.open_session(principal, project_id)).id)

    @server.tool(
        description="Close one of your sessions (closing it again is a no-op).", annotations=ToolAnnotations(idempotent_hint=True)
    )
    @_coded
    async def close_session(ctx: Context, session_id: Id) -> Ok:
        principal = _caller(ctx)
        memesh.charge(principal, Bucket.WRITE)
        await memesh.memory.close_session(principal, session_id)
        return Ok()

    @server.tool(description="Place a standing interest: new cells that match it are delivered to your inbox.")
    @_coded
    async def place_beacon(
        ctx: Context,
        interest: Annotated[str, Field(min_length=1)],
        ttl_s: Annotated[float | None, Field(gt=0, description="Seconds until the beacon expires.")] = None,
    ) -> BeaconPlaced:
        principal = _caller(ctx)
        memesh.charge(principal, Bucket.READ)
        return BeaconPlaced(node_id=(await memesh.inbox.place_beacon(principal, interest, None, ttl_s)).id)

    @server.tool(description="Remove one of your beacons.", annotations=ToolAnnotations(idempotent_hint=True))
    @_coded
    async def remove_beacon(ctx: Context, node_id: Id) -> Ok:
        principal = _caller(ctx)
        memesh.charge(principal, Bucket.READ)
        await memesh.inbox.remove_beacon(principal, node_id)
        return Ok()

    @server.tool(description="Read a scene: its summary and member cell ids.", annotations=read_only)
    @_coded
    async def get_scene(ctx: Context, scene_id: Id) -> SceneView:
        principal = _caller(ctx)
        memesh.charge(principal, Bucket.READ)
        scene = await memesh.memory.get_scene(principal, scene_id)
        return SceneView(
            id=scene.id,
            project_id=scene.project_id,
            summary=scene.summary,
            members=list(scene.members),
            member_count=scene.live_count,
        )

    @server.tool(description=PULL)
    @_coded
    async def pull_inbox(
        ctx: Context,
        since: Annotated[int | None, Field(ge=0, le=INT64_MAX)] = None,  # REST's bounds (PullIn)
        ack: Annotated[int | None, Field(ge=0, le=INT64_MAX)] = None,
        limit: Annotated[int | None, Field(ge=0, le=INT32_MAX)] = None,
        include_embeddings: bool = False,
    ) -> dict[str, Any]:
        principal = _caller(ctx)
        memesh.charge(principal, Bucket.INBOX)
        return pull_page(await memesh.inbox.pull(principal, since, ack, limit), include_embeddings)

    return server
