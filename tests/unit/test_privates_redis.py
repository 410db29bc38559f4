"""`celery_redqueue.privates.socket_identity` on the installed redis-py, against a real server:
it changes when a connection reconnects (``CLIENT UNBLOCK`` needs the server's id of it)."""

import redis

from celery_redqueue import privates


def test_socket_identity_changes_with_a_reconnect(redqueue_server_url):
    conn = redis.Redis.from_url(redqueue_server_url).connection_pool.make_connection()
    try:
        assert privates.socket_identity(conn) is None
        conn.connect()
        first = privates.socket_identity(conn)
        assert first is not None and privates.socket_identity(conn) == first
        conn.send_command("CLIENT", "ID")
        before = conn.read_response()
        conn.disconnect()
        assert privates.socket_identity(conn) is None
        conn.connect()
        conn.send_command("CLIENT", "ID")
        assert conn.read_response() != before  # a new connection on the server: a new id
        assert privates.socket_identity(conn) is not None
    finally:
        conn.disconnect()
