"""``strom users create|delete|list``: users' SCRAM credentials (AlterUserScramCredentials /
DescribeUserScramCredentials), what ``kafka-configs.sh --entity-type users --alter
--add-config 'SCRAM-SHA-256=[password=…]'`` does in Kafka.

``create NAME --password PW`` sets both SCRAM-SHA-256 and SCRAM-SHA-512 unless
``--mechanism`` names one (repeatable); the password is salted on this side, only the salted
password is sent. ``delete NAME`` removes the user's credentials (all mechanisms unless
``--mechanism``). ``list [NAME …]`` prints each user's mechanisms and iterations. A TLS or
SASL listener is reached with Kafka's client properties in ``--command-config``
(``security.protocol``, ``ssl.*``, ``sasl.*``: :mod:`strom.client.security`).
"""

from __future__ import annotations

import argparse
import getpass

from strom.cli.client_props import add_client_config, admin_options
from strom.client.scram_admin import DEFAULT_ITERATIONS, ScramDelete, ScramUpsert
from strom.client.sync import SyncAdminClient
from strom.common.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("users", help="create, delete and list SCRAM users",
                       description="Manage users' SCRAM credentials (SASL/SCRAM logins).")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    c = actions.add_parser("create", help="create a user or change its password")
    c.add_argument("name")
    c.add_argument("--password", help="the password (asked for when not given)")
    c.add_argument("--mechanism", action="append", choices=list(MECHANISMS),
                   help="SCRAM mechanism; repeatable (default: both)")
    c.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"PBKDF2 iterations ({MIN_ITERATIONS}-{MAX_ITERATIONS}, default "
                        f"{DEFAULT_ITERATIONS})")
    add_client_config(c, "admin")
    c.set_defaults(run=run_create)

    d = actions.add_parser("delete", help="delete a user's credentials")
    d.add_argument("name")
    d.add_argument("--mechanism", action="append", choices=list(MECHANISMS),
                   help="only this mechanism; repeatable (default: every one it has)")
    add_client_config(d, "admin")
    d.set_defaults(run=run_delete)

    li = actions.add_parser("list", help="list users and their mechanisms")
    li.add_argument("names", nargs="*", help="only these users")
    add_client_config(li, "admin")
    li.set_defaults(run=run_list)


def _admin(args: argparse.Namespace) -> SyncAdminClient:
    return SyncAdminClient(**admin_options(args))


def run_create(args: argparse.Namespace) -> int:
    password = args.password
    if password is None:
        password = getpass.getpass(f"Password for {args.name}: ")
    mechanisms = args.mechanism or list(MECHANISMS)
    with _admin(args) as admin:
        admin.alter_user_scram_credentials(
            [ScramUpsert(args.name, m, password, args.iterations) for m in mechanisms])
    print(f"Created SCRAM credentials of user {args.name} ({', '.join(mechanisms)}).")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        mechanisms = args.mechanism
        if not mechanisms:
            users = admin.describe_user_scram_credentials([args.name])
            mechanisms = [m for m, _i in users[0].credentials]
        admin.alter_user_scram_credentials([ScramDelete(args.name, m) for m in mechanisms])
    print(f"Deleted SCRAM credentials of user {args.name} ({', '.join(mechanisms)}).")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        users = admin.describe_user_scram_credentials(args.names or None)
    if not users:
        print("(no SCRAM users)")
    for user in users:
        mechanisms = ", ".join(f"{m} (iterations {i})" for m, i in user.credentials)
        print(f"{user.user}: {mechanisms}")
    return 0
