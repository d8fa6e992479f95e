"""`reminders sender` / `python -m sender`."""

from __future__ import annotations

import threading

from reminder_core.domain.retry import RetryPolicy
from reminder_core.errors import configuration_errors
from reminder_core.links import LinkSigner, delay_text
from reminder_core.logging import configure_logging
from reminder_core.runtime import Runtime, open_runtime, run_services, stopped_while_opening
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from reminder_core.worker.signals import install_stop_handlers
from sender.providers import FileSinkProvider, Provider
from sender.providers.instrumented import InstrumentedProvider
from sender.providers.webhook import WebhookChannel
from sender.render import Renderer
from sender.service import Sender


def build_provider(settings: Settings) -> Provider:
    """The provider named by EMAIL_PROVIDER; when EMAIL_PROVIDER_BACKUP is set, primary
    and backup each behind a circuit breaker (sender/providers/failover.py). Each
    provider's calls are measured (`InstrumentedProvider`: latency and result metrics).

    Raises:
        ValueError: a provider is unknown, configured without what it needs (e.g. an API
            key), or named twice.
    """
    primary = InstrumentedProvider(build_single_provider(settings.email_provider, settings))
    backup_name = settings.email_provider_backup
    if not backup_name:
        return primary
    if backup_name == settings.email_provider:
        raise ValueError("EMAIL_PROVIDER_BACKUP must name another provider than EMAIL_PROVIDER")
    backup = InstrumentedProvider(build_single_provider(backup_name, settings))
    from sender.providers.failover import FailoverProvider  # pybreaker, redis

    return FailoverProvider.from_settings([primary, backup], settings)


def build_single_provider(name: str, settings: Settings) -> Provider:
    """The provider called `name` (a value EMAIL_PROVIDER accepts), without failover.

    Raises:
        ValueError: an unknown name, or a provider configured without what it needs.
    """
    # Each adapter's client library (aiohttp, boto3, smtplib) is imported only when it is
    # the one configured: a worker's start costs less CPU (docs/design.md, "Layout").
    if name == "resend":
        from sender.providers.resend import ResendProvider

        return ResendProvider.from_settings(settings)
    if name == "ses":
        from sender.providers.ses import SesProvider

        return SesProvider.from_settings(settings)
    if name == "smtp":
        from sender.providers.smtp import SmtpProvider

        return SmtpProvider.from_settings(settings)
    if name == "file":
        return FileSinkProvider(settings.effective_mail_dir)
    raise ValueError(f"unknown email provider {name!r}")


def build(rt: Runtime, stop: threading.Event | None = None) -> Sender:
    s = rt.settings
    return Sender(
        rt.engine,
        rt.queue,
        rt.profiles,
        Renderer(s.template_dir, snooze_label=delay_text(s.snooze_delay_s)),
        build_provider(s),
        mail_from=s.mail_from,
        visibility_timeout_s=s.visibility_timeout_s,
        lease_s=s.delivery_lease_s,
        schedule_config=ScheduleConfig.from_settings(s),
        retry=RetryPolicy(
            attempts=s.send_attempts,
            base_s=s.retry_base_s,
            max_wait_s=s.retry_max_wait_s,
            budget_s=s.delivery_budget_s,
        ),
        stop=stop,
        batch_size=s.sender_batch_size,
        batch_max=s.sender_batch_max,
        batch_target_s=s.sender_batch_target_s,
        concurrency=s.sender_concurrency,
        flush_interval_s=s.sender_flush_interval_s,
        flush_max=s.sender_flush_max,
        owns_provider=True,
        coalesce_s=s.sender_coalesce_s,
        links=LinkSigner.from_settings(s),
        webhooks=WebhookChannel(s.destination_policy(), timeout_s=s.webhook_channel_timeout_s),
        leaseless_first_send=s.sender_leaseless_first_send,
    )


def main(settings: Settings | None = None) -> int:
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)
    stop = threading.Event()
    install_stop_handlers(stop)  # before the database opens (`stopped_while_opening`)
    if stopped_while_opening(stop):  # a signal held since the first line
        return 0
    with configuration_errors():
        rt = open_runtime(
            settings, application_name="reminders-sender", check_queue=True, worker=True
        )
        sender = build(rt, stop)
    try:
        if stopped_while_opening(stop):
            return 0
        return run_services(
            [(sender, rt.settings.sender_poll_interval_s)], rt.settings, stop, engine=rt.engine
        )
    finally:
        sender.close()
        rt.close()
