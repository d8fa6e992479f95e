"""Email providers behind one interface."""

from sender.providers.base import OutgoingEmail, Provider, SendReceipt
from sender.providers.file_sink import FileSinkProvider

__all__ = ["FileSinkProvider", "OutgoingEmail", "Provider", "SendReceipt"]
