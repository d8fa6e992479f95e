"""`reminders sender` / `python -m sender`."""

from __future__ import annotations

from reminder_core.logging import configure_logging
from reminder_core.runtime import Runtime, open_runtime, run_services
from reminder_core.scheduling import ScheduleConfig
from reminder_core.settings import Settings
from sender.providers import FileSinkProvider
from sender.render import Renderer
from sender.service import Sender


def build(rt: Runtime) -> Sender:
    s = rt.settings
    return Sender(
        rt.engine,
        rt.queue,
        rt.profiles,
        Renderer(s.template_dir),
        FileSinkProvider(s.effective_mail_dir),
        mail_from=s.mail_from,
        visibility_timeout_s=s.visibility_timeout_s,
        lease_s=s.delivery_lease_s,
        schedule_config=ScheduleConfig.from_settings(s),
        batch_size=s.sender_batch_size,
    )


def main(settings: Settings | None = None) -> int:
    settings = settings or Settings()
    configure_logging(settings.log_level)
    rt = open_runtime(settings, application_name="reminders-sender")
    try:
        return run_services([(build(rt), settings.sender_poll_interval_s)], settings)
    finally:
        rt.close()
