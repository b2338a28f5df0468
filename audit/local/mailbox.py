"""`kaudit mailbox`: a local SMTP server that saves every email it receives as a file.

The demo's alert emails go here (loopback only), one `.eml` file each under `<state_dir>/mail`,
so they can be read with any mail client or `cat`. Not for production: it accepts anything.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from email import message_from_bytes, policy
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from audit.settings import Settings


log = logging.getLogger(__name__)


class SavingHandler:
    """aiosmtpd handler: every accepted message becomes `<folder>/<n>-<time>.eml`."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's hook name)
        with self._lock:
            number = len(list(self.folder.glob("*.eml"))) + 1
            path = self.folder / f"{number:04d}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.eml"
            path.write_bytes(envelope.content)
        subject = message_from_bytes(envelope.content, policy=policy.default)["subject"]
        log.info("email saved", extra={"file": path.name, "to": ",".join(envelope.rcpt_tos), "subject": subject})
        return "250 Message accepted for delivery"


def saved_emails(folder: Path) -> list[tuple[Path, str]]:
    """(file, subject) of every saved email, oldest first."""
    return [
        (path, str(message_from_bytes(path.read_bytes(), policy=policy.default)["subject"]))
        for path in sorted(Path(folder).glob("*.eml"))
    ]


def mail_dir(settings: Settings) -> Path:
    return Path(settings.state_dir) / "mail"


def run(args: argparse.Namespace, settings: Settings) -> int:
    import signal

    from aiosmtpd.controller import Controller

    port = args.port or settings.smtp.port
    controller = Controller(SavingHandler(mail_dir(settings)), hostname="127.0.0.1", port=port)
    controller.start()
    print(f"mailbox listening on 127.0.0.1:{port}, saving to {mail_dir(settings)}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    controller.stop()
    return 0
