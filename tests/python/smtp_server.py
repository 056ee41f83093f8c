"""An SMTP server for the e-mail alert test: aiosmtpd on 127.0.0.1 with STARTTLS required
(the stack's throwaway certificate) and AUTH required (one user). Prints `listening PORT`,
then one JSON line per message received: who authenticated, whether over TLS, the envelope,
and the message's subject and text as a mail reader decodes them.

usage: smtp_server.py CERT KEY USER PASSWORD
"""

import email
import email.policy
import json
import socket
import ssl
import sys
import threading

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

cert, key, user, password = sys.argv[1:5]


class Authenticator:
    def __call__(self, server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == user
            and auth_data.password.decode() == password
        )
        return AuthResult(success=ok, handled=False)


class Printer:
    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        print(
            json.dumps(
                {
                    "auth": session.authenticated and user,
                    "tls": session.ssl is not None,
                    "from": envelope.mail_from,
                    "to": envelope.rcpt_tos,
                    "subject": str(message["subject"]),
                    "content_type": message.get_content_type(),
                    "text": message.get_content(),
                }
            ),
            flush=True,
        )
        return "250 OK"


# aiosmtpd's controller cannot take port 0: a free port, asked of the kernel.
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]

context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(cert, key)
controller = Controller(
    Printer(),
    hostname="127.0.0.1",
    port=port,
    tls_context=context,
    require_starttls=True,
    authenticator=Authenticator(),
    auth_required=True,
)
controller.start()
print(f"listening {port}", flush=True)
# Until the test kills it (or an hour has passed).
threading.Event().wait(3600)
