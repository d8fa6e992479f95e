"""Configuration of every workload, read from environment variables (pydantic-settings).

Each field below is one row of the table in docs/configuration.md; the environment
variable is the field name in upper case (e.g. `DATABASE_URL`, `POLL_INTERVAL_S`).
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import time
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from reminder_core.cells import CELL_NAME, CellConfig
from reminder_core.destinations import DestinationPolicy, parse_networks
from reminder_core.errors import ConfigurationError

#: The values EMAIL_PROVIDER and EMAIL_PROVIDER_BACKUP accept.
EmailProviderName = Literal["file", "resend", "ses", "smtp"]

# An SNS topic ARN: arn:<partition>:sns:<region>:<12-digit account>:<name>[.fifo]
# (AWS General Reference, "Amazon Resource Names"; SNS CreateTopic name rules).
SNS_TOPIC_ARN = re.compile(
    r"arn:aws(?:-[a-z]+)*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(?:\.fifo)?"
)


class Settings(BaseSettings):
    """Typed settings; build one in `main()` and pass it down (never at import time)."""

    # env_ignore_empty: a variable set to "" means unset (its default), for every setting.
    # allow_inf_nan=False: `nan` or `inf` for a number of seconds is refused as not a finite
    # number (it was refused by the bound it failed, "less than or equal to 60": trial
    # helper-59).
    model_config = SettingsConfigDict(
        env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True,
        allow_inf_nan=False,
    )  # fmt: skip

    # --- storage ---
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL. Unset: an embedded PostgreSQL under STATE_DIR/pgdata.",
    )
    state_dir: Path = Field(
        default=Path(".reminders"),
        description="Local state: embedded database, dev JWT secret, mail sink, profiles file.",
    )
    db_pool_size: int = Field(default=5, ge=1, le=100)

    # --- cells (docs/design.md, "Cells"; issue 18) ---
    cells: Annotated[tuple[CellConfig, ...], NoDecode] = Field(
        default=(),
        description="JSON list of cells, each {name, database_url, queue_url, weight,"
        " accepts_new_users}: its own PostgreSQL database and queue. Unset: one cell,"
        " `default`, of DATABASE_URL and QUEUE_URL.",
    )
    cell: str | None = Field(
        default=None,
        pattern=CELL_NAME,
        description="The cell a worker runs for (`--cell NAME`); required with CELLS.",
    )
    cell_cache_ttl_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="How long the API trusts a user's cell as looked up in the directory.",
    )
    directory_database_url: str | None = Field(
        default=None,
        description="The database of the cell directory (which user lives in which cell)."
        " Unset: the first cell's database.",
    )

    # --- queue ---
    queue_url: str = Field(
        default="postgres://reminders",
        description="postgres://<queue name> for the PostgreSQL table queue; sqs://<queue name>"
        " or an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>) for SQS.",
    )
    visibility_timeout_s: float = Field(default=60.0, gt=0, le=43_200)
    max_receive_count: int = Field(default=5, ge=1, le=1000)
    sqs_endpoint_url: str | None = Field(
        default=None,
        pattern=r"^https?://",
        description="SQS endpoint override, e.g. a local SQS-compatible server. Unset: AWS.",
    )
    sqs_wait_time_s: int = Field(
        default=2, ge=0, le=20, description="Long-poll wait of an SQS receive (WaitTimeSeconds)."
    )
    aws_region: str | None = Field(
        default=None,
        description="AWS region. Unset: from the SQS queue URL, else AWS_DEFAULT_REGION.",
    )

    # --- auth ---
    jwt_secret: str | None = Field(
        default=None,
        description="HMAC key for bearer tokens. Unset: a random key kept in STATE_DIR/jwt_secret.",
    )
    jwt_algorithm: str = Field(default="HS256", pattern=r"^(HS256|HS384|HS512)$")
    jwt_issuer: str | None = None
    jwt_audience: str | None = None

    # --- profiles ---
    profile_service_url: str | None = Field(
        default=None,
        pattern=r"^https?://",
        description="User profile service base URL (GET {url}/users/{id}). Unset: PROFILES_FILE.",
    )
    profile_service_token: str | None = Field(
        default=None, description="Sent as `Authorization: Bearer <token>` when set."
    )
    profile_service_connect_timeout_s: float = Field(default=1.0, gt=0, le=60)
    profile_service_read_timeout_s: float = Field(default=2.0, gt=0, le=60)
    profile_service_attempts: int = Field(
        default=3, ge=1, le=10, description="Calls per lookup on transient failures."
    )
    profile_service_retry_base_s: float = Field(
        default=0.1, gt=0, le=10, description="First backoff ceiling; doubles (full jitter)."
    )
    profile_service_budget_s: float = Field(
        default=5.0, gt=0, le=60, description="A lookup, retries included, ends within this."
    )
    profile_cache_ttl_s: float = Field(
        default=60.0, ge=0, le=3600, description="Profiles found are reused this long (0: off)."
    )
    profile_cache_not_found_ttl_s: float = Field(
        default=5.0, ge=0, le=3600, description="A 404 is reused this long (0: off)."
    )
    profile_cache_size: int = Field(default=10_000, ge=1, le=10_000_000)
    profiles_file: Path | None = Field(
        default=None, description="Local profile source (JSON). Unset: STATE_DIR/profiles.json."
    )

    # --- scheduling ---
    lookahead_s: float = Field(
        default=2.0, ge=0, le=300, description="Claim reminders due this far ahead."
    )
    claim_batch_size: int = Field(default=500, ge=1, le=10_000)
    coordinator_poll_interval_s: float = Field(default=1.0, gt=0, le=60)
    outbox_grace_s: float = Field(
        default=10.0, ge=0, description="Sweeper republishes rows unpublished for this long."
    )
    sweeper_poll_interval_s: float = Field(default=5.0, gt=0, le=300)
    sender_poll_interval_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="Longest wait between two receives of an idle sender. On the PostgreSQL"
        " queue a sender wakes sooner: when the next message becomes visible (plus"
        " SENDER_COALESCE_S) or a new one is sent (LISTEN/NOTIFY).",
    )
    sender_coalesce_s: float = Field(
        default=0.05,
        ge=0,
        le=5,
        description="PostgreSQL queue: a woken sender waits this long past the next"
        " message's visibility, so that messages due together are received as one batch.",
    )
    sender_batch_size: int = Field(
        default=100,
        ge=1,
        le=1000,
        description="Messages per receive, handled as one set (SQS returns at most 10 per"
        " call; the SQS backend makes several calls), until the sender has measured its"
        " pace; then the fewest a receive asks for (SENDER_BATCH_TARGET_S).",
    )
    sender_batch_max: int = Field(
        default=500,
        ge=1,
        le=1000,
        description="The most messages a receive asks for when SENDER_BATCH_TARGET_S sizes"
        " it (a value below SENDER_BATCH_SIZE counts as SENDER_BATCH_SIZE).",
    )
    sender_batch_target_s: float = Field(
        default=0.5,
        ge=0,
        le=60,
        description="A receive asks for about this many seconds of the sender's work at"
        " the pace its last full batches were handled, between SENDER_BATCH_SIZE and"
        " SENDER_BATCH_MAX: large batches for a fast provider, whose fixed cost per batch"
        " then weighs little, short ones for a slow one. 0: always SENDER_BATCH_SIZE.",
    )
    sender_concurrency: int = Field(
        default=8, ge=1, le=256, description="Provider calls in flight at once per sender."
    )
    sender_flush_interval_s: float = Field(
        default=0.005,
        gt=0,
        le=1,
        description="The sender's completer writes send outcomes at most once per this"
        " interval (a lone answer at once): a crash repeats at most the accepted sends"
        ' not yet written (docs/operations.md "Delivery guarantees").',
    )
    sender_flush_max: int = Field(
        default=100, ge=1, le=1000, description="Outcomes that make the completer write at once."
    )
    sender_leaseless_first_send: bool = Field(
        default=True,
        description="PostgreSQL queue and a provider that delivers each idempotency key"
        " once (Resend, the file sink): the first receive of a one-time email occurrence"
        " is sent under its message's receipt handle alone, and its delivery row written"
        " once with the outcome (no `sending` row first). False: every send is leased"
        ' (docs/design.md, "First sends without a lease").',
    )
    delivery_lease_s: float = Field(
        default=45.0,
        gt=0,
        description="A `sending` row is taken over after this long without a heartbeat."
        " Shorter than VISIBILITY_TIMEOUT_S, so that a message back after its sender died"
        " finds the lease ended (not `busy`, which would cost it another receive); longer"
        " than two heartbeats (VISIBILITY_TIMEOUT_S / 3 each).",
    )
    all_day_local_time: time = Field(
        default=time(9, 0), description="Local time at which all-day reminders fire."
    )
    min_recurrence_spacing_s: float = Field(
        default=3600.0,
        ge=0,
        description="Refuse rules whose occurrences come closer than this (seconds).",
    )
    max_rrule_count: int = Field(default=1000, ge=1, le=100_000)
    max_exdates: int = Field(default=100, ge=0, le=10_000)
    expansion_max_iterations: int = Field(default=100_000, ge=100)

    # --- metrics and alerts (docs/design.md, "Metrics", "Alerts"; docs/operations.md) ---
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of a worker's /metrics and /healthz (coordinator, sweeper, sender,"
        " maintenance; `reminders dev` serves it once). 0: off. The API serves /metrics on"
        " its own port.",
    )
    metrics_host: str = Field(
        default="0.0.0.0", description="Interface of the worker metrics port."
    )
    liveness_stale_s: float = Field(
        default=600.0,
        gt=0,
        description="A worker loop that has neither started nor finished a tick for this long"
        " makes /healthz answer 503 (longer than the longest tick: DELIVERY_BUDGET_S).",
    )
    alert_next_run_lag_s: float = Field(
        default=120.0, ge=0, description="`reminders status`: next_run_lag over this alerts."
    )
    alert_delivery_lag_p99_s: float = Field(
        default=150.0,
        ge=0,
        description="`reminders status`: p99 delivery lag of the last hour over this alerts.",
    )
    alert_outbox_age_s: float = Field(
        default=60.0,
        ge=0,
        description="`reminders status`: an unpublished outbox row older than this alerts.",
    )
    alert_dlq_depth: int = Field(
        default=0, ge=0, description="`reminders status`: more dead letters than this alert."
    )
    alert_breaker_open_s: float = Field(
        default=300.0,
        ge=0,
        description="`reminders status`: a shared breaker open longer than this alerts.",
    )
    alert_worker_roles: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("coordinator", "outbox_sweeper", "sender", "maintenance"),
        description="`reminders status`: each of these roles (workload loops) without a"
        " live worker alerts. Comma-separated in the environment; `none`: no role.",
    )
    worker_heartbeat_interval_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="Each workload process writes its loops' heartbeat rows"
        " (worker_heartbeats) this often.",
    )
    worker_stale_after_s: float = Field(
        default=30.0,
        gt=0,
        description="`reminders status`: a worker not heard from for this long is not live"
        " (keep it a few WORKER_HEARTBEAT_INTERVAL_S).",
    )
    worker_heartbeats_retention_days: float = Field(
        default=7.0,
        gt=0,
        description="Worker heartbeat rows not seen for this long are deleted.",
    )
    alert_failures_last_hour: int | None = Field(
        default=None,
        ge=0,
        description="`reminders status`: more failed/bounced/complained/suppressed"
        " occurrences in the last hour than this alert. Unset: shown, never alerts.",
    )

    # --- maintenance (docs/design.md, "Every occurrence ends", "Maintenance") ---
    maintenance_poll_interval_s: float = Field(default=10.0, gt=0, le=3600)
    claim_timeout_s: float = Field(
        default=900.0, gt=0, description="A reminder claimed longer than this is re-driven."
    )
    abandon_after_s: float = Field(
        default=900.0,
        gt=0,
        description="An unheld `sending` row its reminder moved past is failed after this.",
    )
    suppression_recheck_interval_s: float = Field(
        default=300.0,
        gt=0,
        description="A reminder paused by a suppression has its user's profile address"
        " checked again this often (a just-paused one at the next maintenance tick); a"
        " changed address resumes it.",
    )
    webhook_rematch_window_s: float = Field(
        default=3600.0,
        ge=0,
        description="A bounce or complaint whose message id matched no delivery is matched"
        " again by the maintenance workload for this long (the webhook may beat the"
        " sender's commit). 0: never.",
    )

    # --- retention (docs/design.md, "Retention"; coordinator/maintenance/retention.py) ---
    retention_interval_s: float = Field(
        default=600.0,
        gt=0,
        description="The maintenance workload makes and drops delivery_log partitions and"
        " deletes expired rows this often (at once again while a chunk came back full).",
    )
    delivery_log_retention_days: int = Field(
        default=90,
        ge=1,
        le=36_500,
        description="A weekly delivery_log partition is dropped once its whole week is older"
        " than this (never while it holds a `sending` row).",
    )
    delivery_log_partitions_ahead: int = Field(
        default=4,
        ge=1,
        le=104,
        description="Weekly delivery_log partitions kept made ahead of the current week.",
    )
    outbox_retention_days: float = Field(
        default=1.0,
        gt=0,
        description="Published outbox rows are deleted this long after publication"
        " (unpublished ones never).",
    )
    webhook_events_retention_days: float = Field(
        default=90.0,
        gt=0,
        description="Stored bounce and complaint events are deleted this long after their"
        " receipt (a provider's replay after that would be applied again).",
    )
    retention_batch_size: int = Field(
        default=5000, ge=1, le=1_000_000, description="Rows deleted per DELETE statement."
    )

    # --- retries (docs/design.md, "Retries and the dead-letter queue") ---
    send_attempts: int = Field(
        default=4, ge=1, le=20, description="Provider calls per received message."
    )
    retry_base_s: float = Field(
        default=0.5, gt=0, description="First backoff; doubles per attempt (full jitter)."
    )
    retry_max_wait_s: float = Field(
        default=10.0,
        gt=0,
        description="Longest wait between two calls within one receive; a longer "
        "Retry-After hands the message back to the queue for that long instead.",
    )
    delivery_budget_s: float = Field(
        default=300.0, gt=0, description="Retries of one receive stop after this long."
    )

    # --- email ---
    email_provider: EmailProviderName = Field(
        default="file", description="file | resend | ses | smtp"
    )
    resend_api_url: str = "https://api.resend.com"
    resend_api_key: str | None = None
    provider_connect_timeout_s: float = Field(default=5.0, gt=0)
    provider_read_timeout_s: float = Field(default=15.0, gt=0)
    ses_region: str | None = Field(
        default=None, description="AWS region of SES. Unset: AWS_REGION / AWS_DEFAULT_REGION."
    )
    ses_endpoint_url: str | None = Field(
        default=None, description="SES API endpoint override (a local server such as moto)."
    )
    ses_configuration_set: str | None = Field(
        default=None, description="SES configuration set named on every send (event publishing)."
    )
    smtp_host: str | None = None
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_starttls: Literal["required", "opportunistic", "off"] = Field(
        default="required", description="required | opportunistic | off"
    )
    smtp_ca_file: Path | None = Field(
        default=None, description="PEM CA bundle to verify the SMTP server. Unset: system CAs."
    )
    smtp_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="Wait for each SMTP reply (seconds)."
    )
    mail_dir: Path | None = Field(
        default=None, description="File sink directory. Unset: STATE_DIR/mail."
    )
    mail_from: str = "Reminders <reminders@localhost>"
    template_dir: Path | None = Field(
        default=None, description="Directory whose templates override the built-in ones."
    )

    # --- provider failover (docs/design.md, "Provider failover") ---
    email_provider_backup: EmailProviderName | None = Field(
        default=None,
        description="Backup provider (a name EMAIL_PROVIDER accepts, not the same one). "
        "Set: primary and backup each behind a circuit breaker. Unset: no failover.",
    )
    breaker_fail_max: int = Field(
        default=5, ge=1, le=1000, description="Consecutive failures that open a breaker."
    )
    breaker_reset_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="An open breaker lets one half-open probe through after this long.",
    )
    breaker_redis_url: str | None = Field(
        default=None,
        pattern=r"^(redis|rediss|unix)://",
        description="Redis shared by every sender for the breaker state. Unset: per process.",
    )

    # --- links in emails (docs/design.md, "Links in emails") ---
    public_base_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        description="The API's base URL as recipients reach it (e.g. https://reminders.example.com):"
        " emails then carry signed snooze and stop links and List-Unsubscribe headers"
        " (RFC 8058). Unset: no links (`reminders dev` sets its own URL).",
    )
    link_secret: SecretStr | None = Field(
        default=None,
        description="HMAC key of the links in emails (at least 32 bytes). Unset: derived from"
        " the JWT key (JWT_SECRET or STATE_DIR/jwt_secret).",
    )
    link_ttl_s: float = Field(
        default=30 * 86400.0,
        gt=0,
        le=366 * 86400.0,
        description="A link in an email works this long after the occurrence the email is"
        " about (after the send, for an email sent more than a day late).",
    )
    snooze_delay_s: float = Field(
        default=3600.0,
        ge=1,
        le=7 * 86400.0,
        description='The "remind me later" link brings the reminder back this long after'
        " it is used.",
    )
    snooze_tomorrow_at: str = Field(
        default="09:00",
        pattern=r"^([01]\d|2[0-3]):[0-5]\d$",
        description='The "tomorrow" link brings the reminder back at this local time the'
        " next day (the reminder's zone, else the profile's).",
    )

    # --- the webhook channel (docs/design.md, "Webhook channel") ---
    webhook_channel_allow_http: bool = Field(
        default=False,
        description="Accept plain http:// webhook endpoints (https only by default).",
    )
    webhook_channel_allow_networks: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Networks (comma-separated CIDRs, e.g. 10.1.0.0/16) webhook endpoints may"
        " resolve to although not public; empty: only public addresses (no loopback,"
        " private, link-local such as 169.254.169.254, or reserved ones).",
    )
    webhook_channel_timeout_s: float = Field(
        default=10.0, gt=0, le=120, description="Connect and read timeout of one webhook POST."
    )
    webhook_channel_max_endpoints: int = Field(
        default=20, ge=1, le=1000, description="Webhook endpoints one user may register."
    )

    # --- inbound webhooks (docs/design.md, "Webhooks"; see webhooks/) ---
    webhook_sns_topic_arns: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="SNS topic ARNs (comma-separated) whose SES events POST /v1/webhooks/ses"
        " accepts and whose subscriptions it confirms. Empty: that endpoint answers 404.",
    )
    webhook_resend_secret: SecretStr | None = Field(
        default=None,
        description="Resend webhook signing secret (whsec_...). Unset: /v1/webhooks/resend 404.",
    )
    webhook_postmark_user: SecretStr | None = Field(
        default=None, description="HTTP basic auth user Postmark sends with its webhooks."
    )
    webhook_postmark_password: SecretStr | None = Field(
        default=None,
        description="HTTP basic auth password of the Postmark webhooks. Unset (or no user):"
        " /v1/webhooks/postmark answers 404.",
    )
    webhook_max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Largest webhook request body; larger ones answer 413.",
    )

    @model_validator(mode="after")
    def _check_jwt_key_size(self) -> Settings:
        # RFC 7518 §3.2: an HMAC key MUST be at least as long as the hash output (32
        # bytes for HS256, 48 for HS384, 64 for HS512); a short one is guessable offline.
        if self.jwt_secret is not None:
            need = {"HS256": 32, "HS384": 48, "HS512": 64}[self.jwt_algorithm]
            if len(self.jwt_secret.encode()) < need:
                raise ValueError(
                    f"JWT_SECRET must be at least {need} bytes for {self.jwt_algorithm}"
                    " (RFC 7518 §3.2)"
                )
        return self

    @model_validator(mode="after")
    def _check_link_secret_size(self) -> Settings:
        # As for JWT_SECRET (RFC 7518 §3.2): links are signed with HS256.
        if self.link_secret is not None and len(self.link_secret.get_secret_value()) < 32:
            raise ValueError("LINK_SECRET must be at least 32 bytes (RFC 7518 §3.2)")
        return self

    @field_validator("cells", mode="before")
    @classmethod
    def _read_cells(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"CELLS must be a JSON list of cells: {exc}") from None
        return value

    @field_validator("webhook_channel_allow_networks")
    @classmethod
    def _check_networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_networks(value)  # ValueError names the bad one
        return value

    def destination_policy(self) -> DestinationPolicy:
        """The SSRF policy of the webhook channel (reminder_core.destinations)."""
        return DestinationPolicy(
            allow_http=self.webhook_channel_allow_http,
            allow_networks=parse_networks(self.webhook_channel_allow_networks),
        )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator(
        "webhook_sns_topic_arns",
        "alert_worker_roles",
        "webhook_channel_allow_networks",
        mode="before",
    )
    @classmethod
    def _split_comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("alert_worker_roles")
    @classmethod
    def _no_roles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # "none": no role is required (an empty variable means the default).
        return () if value == ("none",) else value

    @field_validator("webhook_sns_topic_arns")
    @classmethod
    def _check_topic_arns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arn in value:
            if not SNS_TOPIC_ARN.fullmatch(arn):
                raise ValueError(f"not an SNS topic ARN: {arn!r}")
        return value

    # --- API (docs/design.md, "API capacity and overload") ---
    api_workers: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Processes serving the API (`reminders api --workers` wins). Unset: one"
        " per CPU this process may run on, at most 4; Kubernetes runs one per pod (the HPA"
        " scales pods).",
    )
    api_max_in_flight: int = Field(
        default=4,
        ge=1,
        le=10_000,
        description="Requests one API process works on at once; up to API_MAX_QUEUED more"
        " wait for a slot (each up to API_QUEUE_TIMEOUT_S), the rest are answered 503 with"
        " Retry-After (health, readiness and metrics are never held back). A request is"
        " mostly CPU here and in the database: more in flight only lengthens the queues."
        " Raise it when requests wait on a slow profile service. Keep 2 x DB_POOL_SIZE above"
        " it, so that readiness always finds a connection.",
    )
    api_max_queued: int = Field(
        default=16,
        ge=0,
        le=100_000,
        description="Requests one API process lets wait for an in-flight slot; one more is"
        " shed at once (503).",
    )
    api_queue_timeout_s: float = Field(
        default=0.5,
        ge=0,
        le=30,
        description="Longest a queued request waits for an in-flight slot before it is shed (503).",
    )
    api_retry_after_s: int = Field(
        default=1, ge=1, le=3600, description="Retry-After of a shed request (seconds)."
    )
    rate_limit_per_minute: int = Field(
        default=600,
        ge=0,
        le=1_000_000,
        description="Requests one user (the token's sub) may make to the /v1 API per minute,"
        " shared by every API process (kept in PostgreSQL); past it, 429 with Retry-After."
        " 0: no rate limit.",
    )
    rate_limit_burst: int = Field(
        default=100,
        ge=1,
        le=1_000_000,
        description="Requests one user may make at once after being idle (the GCRA burst);"
        " the budget refills at RATE_LIMIT_PER_MINUTE.",
    )
    quota_live_reminders: int = Field(
        default=10_000,
        ge=0,
        description="Live (pending, claimed or paused) reminders one user may have; a create"
        " or a change that makes one more live is answered 429 and stores nothing. 0: no"
        " quota.",
    )
    quota_occurrences_per_day: int = Field(
        default=0,
        ge=0,
        description="Occurrences one reminder's rule may fire in one local calendar day (in"
        " its zone, over the year from its first occurrence); a create or schedule change"
        " past it is answered 429 and stores nothing. 0 (the default): no quota; the"
        " default MIN_RECURRENCE_SPACING_S (1 h) already keeps a rule at 25 a day at most.",
    )
    api_statement_timeout_s: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="Longest one database statement of the API may run, waiting on a lock"
        " included, before the server cancels it and the request is answered 503 with"
        " Retry-After, nothing of it written (PostgreSQL statement_timeout on the API's"
        " connections). A table locked by a migration or a stuck transaction then holds a"
        " request this long, not until the client gives up. 0: no bound.",
    )
    db_pool_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="Longest a request or worker waits for a pooled database connection"
        " before it fails (503 in the API) instead of queueing indefinitely.",
    )

    # --- process ---
    shutdown_grace_s: float = Field(default=20.0, gt=0)
    gc_gen0_threshold: int = Field(
        default=50_000,
        ge=0,
        le=10_000_000,
        description="Net allocations between two generation-0 collections of Python's"
        " cyclic garbage collector in the API and the workloads (Python's default: 700),"
        " after objects alive at start-up are frozen; 0 leaves the collector as Python"
        " sets it (reminder_core/gc_policy.py).",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        default="INFO",
        description="DEBUG | INFO | WARNING | ERROR | CRITICAL, in any case (the root"
        " logger's level).",
    )
    log_format: Literal["json", "console"] = Field(
        default="json",
        description="json: one JSON object per line on stderr; console: human-readable"
        " (structlog's ConsoleRenderer). `reminders dev` uses console unless this is set.",
    )

    @property
    def effective_mail_dir(self) -> Path:
        """Directory of the file sink provider (`MAIL_DIR` or STATE_DIR/mail)."""
        return self.mail_dir or self.state_dir / "mail"

    @property
    def effective_profiles_file(self) -> Path:
        """Path of the local profile source (`PROFILES_FILE` or STATE_DIR/profiles.json)."""
        return self.profiles_file or self.state_dir / "profiles.json"

    def jwt_key(self, *, create: bool = False) -> str:
        """Return the HMAC key for bearer tokens.

        `JWT_SECRET` wins; otherwise the key stored in STATE_DIR/jwt_secret, so that
        `reminders token` run in the same directory as `reminders dev` mints tokens the
        running instance accepts.

        Args:
            create: write a new random key (0600) when none is stored yet.

        Raises:
            ConfigurationError: no key is configured or stored and `create` is False.
        """
        if self.jwt_secret:
            return self.jwt_secret
        path = self.state_dir / "jwt_secret"
        if path.exists():
            return path.read_text().strip()
        if not create:
            raise ConfigurationError(
                f"no JWT key: set JWT_SECRET or run `reminders dev` once in this directory "
                f"(it stores one in {path})"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(48)
        path.touch(mode=0o600)
        path.write_text(key + "\n")
        return key
