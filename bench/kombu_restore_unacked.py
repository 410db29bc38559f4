"""An attempt at a plain-Celery reproduction (no redqueue) of issue 18, problem 10: a worker
whose Redis broker is SIGKILLed and restarted exited with ``Unrecoverable error:
AttributeError("'NoneType' object has no attribute 'hostname'")`` in kombu's
``restore_unacked`` -> ``_connparams`` (Celery/kombu 5.7.0).

The suspected path (kombu/transport/redis.py): when a channel closes after its Connection
dropped its transport (``Connection._do_close_transport`` sets ``transport.client = None``), the
channel's QoS restores its *unacknowledged* messages, builds a new client and reads
``self.connection.client.hostname``. That needs an unacked message at the moment the broker goes
away, which plain apps rarely hold and redqueue workers nearly always do: drain jobs are
``acks_late`` and countdown drains (bucket waits, delayed calls, ``pool_batch_wait``) wait in
the worker unacked. This script holds one countdown task in a plain worker, SIGKILLs and
restarts the broker, and reports whether the worker exited.

    .venv/bin/python bench/kombu_restore_unacked.py [--tries 3] [--no-eta] [-- worker args]

Last results (2026-12-01): 0 of 2 exits with ``--pool=solo``, 0 of 2 with ``-B --pool=prefork
--concurrency=1``: an unacked ETA message alone does not trigger it; the reproduction is not
minimal yet (see docs/failure-modes.md, "Broker restart").
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import redis

from celery_redqueue.embedded import find_server_binary

EXTRA = ["--pool=solo"]
APP = textwrap.dedent(
    """
    import os
    from celery import Celery
    app = Celery("plain", broker=os.environ["BROKER"])
    app.conf.broker_connection_retry_on_startup = True

    @app.task
    def later():
        pass
    """
)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(binary, port, workdir):
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def one_try(eta: bool) -> tuple[bool, str]:
    binary, port = find_server_binary(), free_port()
    with tempfile.TemporaryDirectory() as workdir:
        with open(os.path.join(workdir, "plain_app.py"), "w") as f:
            f.write(APP)
        server = start_redis(binary, port, workdir)
        env = dict(os.environ, BROKER=f"redis://127.0.0.1:{port}/0", PYTHONPATH=workdir)
        log = open(os.path.join(workdir, "worker.log"), "w+")  # noqa: SIM115 (closed with the dir)
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "plain_app",
                "worker",
                *EXTRA,
                "--loglevel=INFO",
            ],
            env=env,
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            time.sleep(4)
            if eta:
                sys.path.insert(0, workdir)
                os.environ["BROKER"] = env["BROKER"]
                import plain_app

                plain_app.later.apply_async(countdown=600)
                time.sleep(2)  # the worker receives it and holds it, unacked, until its ETA
            server.send_signal(signal.SIGKILL)
            server.wait()
            time.sleep(1)
            server = start_redis(binary, port, workdir)
            for _ in range(30):
                if worker.poll() is not None:
                    break
                time.sleep(0.5)
            exited = worker.poll() is not None
            log.seek(0)
            text = log.read()
            line = next((x for x in text.splitlines() if "Unrecoverable error" in x), "")
            return exited, line
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
            server.kill()
            server.wait()
            sys.modules.pop("plain_app", None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--no-eta", action="store_true", help="hold no unacked message")
    parser.add_argument("worker_args", nargs="*", default=["--pool=solo"])
    args = parser.parse_args()
    EXTRA[:] = args.worker_args
    exits = 0
    for i in range(args.tries):
        exited, line = one_try(eta=not args.no_eta)
        exits += exited
        print(f"try {i + 1}: worker {'EXITED' if exited else 'survived'} {line.strip()[:160]}")
    print(f"{exits} of {args.tries} workers exited")


if __name__ == "__main__":
    main()
