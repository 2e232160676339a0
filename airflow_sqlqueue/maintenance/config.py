"""Which connections and queues the maintenance DAGs work on, read without editing code.

The deployment's configuration, first found wins: the Airflow Variable ``sqlqueue_maintenance`` (JSON), the JSON
or YAML file named by the environment variable ``SQLQUEUE_MAINTENANCE_CONFIG``; without either, every queue
discovered on the connection ``sqlqueue_default``. A DAG run's ``config`` param may replace it for that run, within
limits: a run's conf never chooses code or connections (anyone allowed to trigger a run can write it), so
``alert_callback`` and ``health_samples_conn_id`` always come from the deployment, and a run may only name
connections the deployment configures. The DAG params ``connections`` and ``queues`` then narrow that down (the
same rule: configured connections only). Format (every key optional)::

    {
      "connections": {
        "orders_db": {
          "queues": null,                     # null: discover; a list; or {"queue": {thresholds}}
          "schemas": ["sales"],               # discovery: only these schemas
          "include": ["*"], "exclude": ["audit*"],   # discovery: glob patterns on the table name
          "error_queue": "error",
          "thresholds": {"max_depth": 1000, "max_age_seconds": 900},
          "record_health_samples": false
        }
      },
      "thresholds": {"max_depth": null, "max_age_seconds": null},   # defaults for every connection
      "purge_batch_size": 10000,
      "record_health_samples": false,
      "health_samples_table": "sqlqueue_health_samples",
      "health_samples_conn_id": null,         # null: each connection records into its own database
      "health_samples_retention_days": 30,    # null: keep every sample
      "inbox_retention_days": 7,              # handle_once's inbox rows older than this are purged (null: kept)
      "alert_callback": "my_package.alerts.queue_health_notifier",
      "archive": {                            # the archive-failed DAG (deployment only, like alert_callback)
        "location": "s3://bucket/error-archive",   # a local directory or a URI pyarrow.fs opens
        "older_than_days": 30,                # failed longer ago than this; a run may only ask for older
        "batch_size": 500,
        "max_messages": null                  # null: every selected message in one run
      }
    }

A malformed configuration raises :class:`MaintenanceConfigError` naming the source and the key.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from airflow_sqlqueue.transport.common.validation import is_number, is_whole

#: The Airflow Variable holding the configuration (JSON).
VARIABLE = "sqlqueue_maintenance"
#: Environment variable naming a JSON (or YAML) configuration file, used when the Variable is not set.
CONFIG_ENV = "SQLQUEUE_MAINTENANCE_CONFIG"
DEFAULT_CONN_ID = "sqlqueue_default"
PARAM_SOURCE = "the 'config' param"
VARIABLE_SOURCE = f"Variable {VARIABLE!r}"
DEFAULT_SAMPLES_TABLE = "sqlqueue_health_samples"
DEFAULT_RETENTION_DAYS = 30
#: Days an inbox row (a message ``handle_once`` finished) is kept: a redelivery after that is handled again.
DEFAULT_INBOX_RETENTION_DAYS = 7
THRESHOLD_KEYS = ("max_depth", "max_age_seconds")
_TOP_KEYS = {"connections", "thresholds", "purge_batch_size", "record_health_samples", "health_samples_table",
             "health_samples_conn_id", "health_samples_retention_days", "alert_callback", "archive",
             "inbox_retention_days"}
#: Keys only the deployment's configuration sets: importable code, where samples of every queue are written, and
#: where (and how old) failed messages are archived to.
DEPLOYMENT_ONLY = ("alert_callback", "health_samples_conn_id", "archive")
ARCHIVE_KEYS = {"location", "older_than_days", "batch_size", "max_messages"}
DEFAULT_ARCHIVE_DAYS = 30
_CONN_KEYS = {"queues", "schemas", "include", "exclude", "error_queue", "thresholds", "record_health_samples"}


class MaintenanceConfigError(ValueError):
    """The maintenance configuration is malformed (the message names the key and the source)."""


@dataclass
class Target:
    """One queue on one connection, with the health thresholds that apply to it."""

    conn_id: str
    queue: str
    max_depth: int | None = None
    max_age_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ConnectionConfig:
    """What to maintain on one Airflow connection."""

    conn_id: str
    queues: list[str] | None = None
    queue_thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    schemas: list[str] | None = None
    include: list[str] = field(default_factory=lambda: ["*"])
    exclude: list[str] = field(default_factory=list)
    error_queue: str = "error"
    thresholds: dict[str, Any] = field(default_factory=dict)
    record_health_samples: bool | None = None


@dataclass
class ArchiveConfig:
    """Where the archive-failed DAG writes, and what it archives (the deployment's ``archive`` key)."""

    location: str
    older_than_days: float = DEFAULT_ARCHIVE_DAYS
    batch_size: int = 500
    max_messages: int | None = None


@dataclass
class MaintenanceConfig:
    """The whole configuration, after params were applied."""

    connections: list[ConnectionConfig]
    thresholds: dict[str, Any] = field(default_factory=dict)
    purge_batch_size: int = 10_000
    record_health_samples: bool = False
    health_samples_table: str = DEFAULT_SAMPLES_TABLE
    health_samples_conn_id: str | None = None
    health_samples_retention_days: float | None = DEFAULT_RETENTION_DAYS
    inbox_retention_days: float | None = DEFAULT_INBOX_RETENTION_DAYS
    alert_callback: str | None = None
    archive: ArchiveConfig | None = None
    source: str = "default"

    def connection_ids(self) -> list[str]:
        return [conn.conn_id for conn in self.connections]

    def connection(self, conn_id: str) -> ConnectionConfig:
        for conn in self.connections:
            if conn.conn_id == conn_id:
                return conn
        return ConnectionConfig(conn_id)

    def records_samples(self, conn_id: str) -> bool:
        own = self.connection(conn_id).record_health_samples
        return self.record_health_samples if own is None else bool(own)

    def samples_conn_id(self, conn_id: str) -> str:
        """The connection whose database holds the samples of ``conn_id``'s queues."""
        return self.health_samples_conn_id or conn_id


# -- reading ---------------------------------------------------------------------------------------------
def raw_config(params: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """The configuration dict and where it came from, in words (named in every error about it).

    A run's ``config`` param replaces the deployment's configuration for that run, but may not set
    ``DEPLOYMENT_ONLY`` keys (they are taken from the deployment) nor name connections it does not configure.
    """
    deployed, source = deployment_config()
    given = (params or {}).get("config")
    if not given:
        return deployed, source
    override = _as_dict(given, PARAM_SOURCE)
    for key in DEPLOYMENT_ONLY:
        if key in override and override[key] != deployed.get(key):
            raise MaintenanceConfigError(
                f"{PARAM_SOURCE}: {key} cannot be set by a DAG run (a run's conf must not choose code or "
                f"connections); set it in the Variable {VARIABLE!r} or the file named by ${CONFIG_ENV}")
    allowed = configured_connections(deployed, source)
    given_ids = set(parse_config({k: v for k, v in override.items() if k not in DEPLOYMENT_ONLY},
                                 PARAM_SOURCE).connection_ids())
    _only_configured(given_ids, allowed, PARAM_SOURCE, source)
    merged = {k: v for k, v in override.items() if k not in DEPLOYMENT_ONLY}
    merged.update({k: deployed[k] for k in DEPLOYMENT_ONLY if k in deployed})
    return merged, f"{PARAM_SOURCE} (within {source})"


def deployment_config() -> tuple[dict[str, Any], str]:
    """The deployment's configuration (Variable, then file, then the default) and its source, in words."""
    text = _variable_text()
    if text:
        return _as_dict(text, VARIABLE_SOURCE), VARIABLE_SOURCE
    path = os.environ.get(CONFIG_ENV)
    if path:
        return _read_file(Path(path)), f"file {path}"
    return {}, f"default (every queue on {DEFAULT_CONN_ID})"


def configured_connections(deployed: dict[str, Any] | None = None, source: str | None = None) -> set[str]:
    """The connection ids the deployment's configuration names (``sqlqueue_default`` when it names none)."""
    if deployed is None:
        deployed, source = deployment_config()
    return set(parse_config(deployed, source or "config").connection_ids())


def check_connection_allowed(conn_id: str, what: str) -> None:
    """Raise MaintenanceConfigError unless the deployment's configuration names ``conn_id`` (``what``: the param
    it came from)."""
    deployed, source = deployment_config()
    _only_configured({conn_id}, configured_connections(deployed, source), what, source)


def _only_configured(given: set[str], allowed: set[str], what: str, source: str) -> None:
    unknown = sorted(given - allowed)
    if unknown:
        raise MaintenanceConfigError(
            f"{what}: connection{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
            f"{'are' if len(unknown) > 1 else 'is'} not configured for these DAGs ({source} names "
            f"{', '.join(map(repr, sorted(allowed)))}); a DAG run's conf cannot add connections: add them to the "
            f"Variable {VARIABLE!r} or the file named by ${CONFIG_ENV}")


def load_config(params: dict[str, Any] | None = None) -> MaintenanceConfig:
    """The configuration with the DAG params ``connections`` and ``queues`` applied."""
    raw, source = raw_config(params)
    config = parse_config(raw, source)
    params = params or {}
    wanted = params.get("connections")
    if isinstance(wanted, str):
        wanted = [wanted]
    if wanted:
        _only_configured({str(c) for c in wanted}, set(config.connection_ids()), "the 'connections' param", source)
        config.connections = [config.connection(conn_id) for conn_id in wanted]
    queues = params.get("queues")
    if isinstance(queues, str):
        queues = [queues]
    if queues:
        for conn in config.connections:
            conn.queues = list(queues)
    return config


def parse_config(raw: dict[str, Any], source: str = "config") -> MaintenanceConfig:
    """Validate a configuration dict; unknown keys are errors (a typo must not silently do nothing)."""
    _no_unknown(raw, _TOP_KEYS, source)
    connections_raw = raw.get("connections")
    if connections_raw is None:
        connections_raw = {DEFAULT_CONN_ID: {}}
    if isinstance(connections_raw, list):  # a plain list of connection ids: discover on each
        if not all(isinstance(c, str) and c for c in connections_raw):
            raise MaintenanceConfigError(f"{source}: 'connections' as a list must hold connection ids (strings)")
        connections_raw = {c: {} for c in connections_raw}
    if not isinstance(connections_raw, dict) or not connections_raw:
        raise MaintenanceConfigError(f"{source}: 'connections' must be an object of connection id to settings, "
                                     "or a list of connection ids")
    connections = [_connection(str(conn_id), spec or {}, source) for conn_id, spec in connections_raw.items()]
    batch = raw.get("purge_batch_size", 10_000)
    if not is_whole(batch):
        raise MaintenanceConfigError(f"{source}: purge_batch_size must be a positive integer, got {batch!r}")
    retention = raw.get("health_samples_retention_days", DEFAULT_RETENTION_DAYS)
    if retention is not None and not (is_number(retention) and retention > 0):
        raise MaintenanceConfigError(f"{source}: health_samples_retention_days must be a positive number of days "
                                     f"or null (keep every sample), got {retention!r}")
    inbox_retention = raw.get("inbox_retention_days", DEFAULT_INBOX_RETENTION_DAYS)
    if inbox_retention is not None and not (is_number(inbox_retention) and inbox_retention > 0):
        raise MaintenanceConfigError(f"{source}: inbox_retention_days must be a positive number of days or null "
                                     f"(keep every inbox row), got {inbox_retention!r}")
    callback = raw.get("alert_callback")
    if callback is not None and (not isinstance(callback, str) or "." not in callback.strip(".")):
        raise MaintenanceConfigError(f"{source}: alert_callback must be a dotted path 'package.module.attribute', "
                                     f"got {callback!r}")
    return MaintenanceConfig(
        connections=connections,
        thresholds=_thresholds(raw.get("thresholds"), f"{source}: thresholds"),
        purge_batch_size=batch,
        record_health_samples=_flag(raw, "record_health_samples", source) or False,
        health_samples_table=_text(raw, "health_samples_table", source) or DEFAULT_SAMPLES_TABLE,
        health_samples_conn_id=_text(raw, "health_samples_conn_id", source),
        health_samples_retention_days=retention,
        inbox_retention_days=inbox_retention,
        alert_callback=callback,
        archive=_archive(raw.get("archive"), f"{source}: archive"),
        source=source,
    )


def _archive(value: Any, where: str) -> ArchiveConfig | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise MaintenanceConfigError(f"{where} must be an object with {', '.join(sorted(ARCHIVE_KEYS))}")
    _no_unknown(value, ARCHIVE_KEYS, where)
    location = value.get("location")
    if not isinstance(location, str) or not location.strip():
        raise MaintenanceConfigError(f"{where}: location must be a local directory or a URI such as "
                                     f"s3://bucket/error-archive, got {location!r}")
    days = value.get("older_than_days", DEFAULT_ARCHIVE_DAYS)
    if not (is_number(days) and 0 <= days <= 100_000):
        raise MaintenanceConfigError(f"{where}: older_than_days must be a number of days from 0 to 100000, "
                                     f"got {days!r}")
    batch = value.get("batch_size", 500)
    if not (is_whole(batch) and batch <= 10_000):
        raise MaintenanceConfigError(f"{where}: batch_size must be a whole number from 1 to 10000, got {batch!r}")
    most = value.get("max_messages")
    if most is not None and not is_whole(most):
        raise MaintenanceConfigError(f"{where}: max_messages must be a positive whole number or null, got {most!r}")
    return ArchiveConfig(location.strip(), days, batch, most)


def _connection(conn_id: str, spec: dict[str, Any], source: str) -> ConnectionConfig:
    where = f"{source}: connection {conn_id!r}"
    if not isinstance(spec, dict):
        raise MaintenanceConfigError(f"{where} must be an object")
    _no_unknown(spec, _CONN_KEYS, where)
    conn = ConnectionConfig(conn_id)
    queues = spec.get("queues")
    if isinstance(queues, str):
        queues = [queues]
    if isinstance(queues, dict):
        conn.queue_thresholds = {str(q): _thresholds(t, f"{where}: queue {q!r}") for q, t in queues.items()}
        conn.queues = list(conn.queue_thresholds)
    elif isinstance(queues, list):
        if not all(isinstance(q, str) and q for q in queues):
            raise MaintenanceConfigError(f"{where}: 'queues' must list queue addresses (strings)")
        conn.queues = list(queues)
    elif queues is not None:
        raise MaintenanceConfigError(f"{where}: 'queues' must be null (discover), a list or an object")
    for key in ("schemas", "include", "exclude"):
        value = spec.get(key)
        if value is not None:
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise MaintenanceConfigError(f"{where}: {key!r} must be a list of strings")
            setattr(conn, key, list(value))
    conn.error_queue = _text(spec, "error_queue", where) or "error"
    conn.thresholds = _thresholds(spec.get("thresholds"), f"{where}: thresholds")
    conn.record_health_samples = _flag(spec, "record_health_samples", where)
    return conn


def _flag(spec: dict[str, Any], key: str, where: str) -> bool | None:
    value = spec.get(key)
    if value is not None and not isinstance(value, bool):
        raise MaintenanceConfigError(f"{where}: {key} must be true or false, got {value!r}")
    return value


def _text(spec: dict[str, Any], key: str, where: str) -> str | None:
    value = spec.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise MaintenanceConfigError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _thresholds(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MaintenanceConfigError(f"{where} must be an object with {', '.join(THRESHOLD_KEYS)}")
    _no_unknown(value, set(THRESHOLD_KEYS), where)
    out = {}
    for key in THRESHOLD_KEYS:
        number = value.get(key)
        if number is None:
            continue
        if not (is_number(number) and number >= 0):
            raise MaintenanceConfigError(f"{where}: {key} must be a non-negative number, got {number!r}")
        out[key] = number
    return out


def _no_unknown(value: dict[str, Any], known: set[str], where: str) -> None:
    unknown = set(value) - known
    if unknown:
        raise MaintenanceConfigError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(known)}")


def _as_dict(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise MaintenanceConfigError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MaintenanceConfigError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MaintenanceConfigError(f"{CONFIG_ENV}={str(path)!r} cannot be read: {exc}") from None
    where = f"file {path}"
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            return _as_dict(yaml.safe_load(text) or {}, where)
        except yaml.YAMLError as exc:
            raise MaintenanceConfigError(f"{where} is not valid YAML: {exc}") from None
    return _as_dict(text, where)


def _variable_text() -> str | None:
    """The Variable's text, or None when it is not set. Any other failure to read it propagates: falling back
    to the file or to discovery on the default connection would maintain queues nobody configured."""
    from airflow.sdk import Variable

    return Variable.get(VARIABLE, default=None)


# -- targets -------------------------------------------------------------------------------------------
def resolve_queues(conn: ConnectionConfig, transport: Any) -> list[str]:
    """Canonical names of the queues configured (or discovered and filtered) on one connection."""
    if conn.queues is not None:
        return [transport.name(q) for q in conn.queues]
    dialect = transport.dialect
    schemas = None if conn.schemas is None else {s.lower() for s in conn.schemas}
    chosen = []
    for name in transport.discover():
        address = transport.address(name)
        schema = (address.schema or dialect.default_schema or "").lower()
        if schemas is not None and schema not in schemas:
            continue
        if not any(fnmatch.fnmatchcase(address.table, p) for p in conn.include):
            continue
        if any(fnmatch.fnmatchcase(address.table, p) for p in conn.exclude):
            continue
        chosen.append(name)
    return chosen


def retry_targets(conn: ConnectionConfig, transport: Any) -> tuple[str, list[str]]:
    """(error queue, the queues a retry may write to) on one connection: its configured (or discovered and
    filtered) queues, never its error queue. The one list every retry path of a deployment uses (the dashboard,
    the batched retry and the error-queue DAG)."""
    error_queue = transport.name(conn.error_queue)
    error_address = transport.address(error_queue)
    same = transport.dialect.same_queue
    return error_queue, [q for q in resolve_queues(conn, transport) if not same(transport.address(q), error_address)]


def thresholds_for(config: MaintenanceConfig, conn: ConnectionConfig, queue: str, transport: Any,
                   params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Thresholds of one queue: params, then the queue's own, the connection's, the defaults."""
    merged = dict(config.thresholds)
    merged.update(conn.thresholds)
    for name, own in conn.queue_thresholds.items():
        if transport.name(name) == queue:
            merged.update(own)
    for key in THRESHOLD_KEYS:
        if (params or {}).get(key) is not None:
            merged[key] = params[key]  # type: ignore[index]
    return merged
