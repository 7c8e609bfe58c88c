"""moto's S3 server on 127.0.0.1 as a process of its own (``python tests/moto_s3_server.py PORT``).

moto checks a PutObject's ``If-None-Match``/``If-Match`` and then stores the object in two steps, on
one thread per connection: two racing conditional writes may both pass the check. S3 applies each
conditional write atomically; to give the same answers every write request (PUT, POST, DELETE) here
holds one lock while moto handles it (reads stay parallel). ``--unserialized`` serves moto as it is.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

_WRITES = frozenset({"PUT", "POST", "DELETE"})


def serialized_writes(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    lock = threading.Lock()

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] not in _WRITES:
            return app(environ, start_response)
        with lock:
            return list(app(environ, start_response))  # the whole answer made under the lock

    return serve


def main(argv: list[str]) -> None:
    port = int(argv[0])
    app: Any = DomainDispatcherApplication(create_backend_app)
    if "--unserialized" not in argv:
        app = serialized_writes(app)
    make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
