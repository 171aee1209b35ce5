"""`perflab clean DIR`: remove what an experiment made outside its results.

That is: perflab's own schemas in databases it did not create (the store's
`leftover` table; dropped only while their marker still names this
experiment), and each target's data that perflab made and kept (a managed
cluster with `keep_data = true` or after an interruption, its scratch
filesystem's backing file, a DuckDB file perflab created: `Target.data_locations`
and `discard_data`, which never touch what perflab did not make). The
results (the store, the runs' files, the report) stay.

The output directory and its store must be this user's own (`own_output_dir`,
for `resume` too): a results directory from anyone else is read (`show`,
`report`), never acted on. The experiment's writer lock is taken first: the
experiment must not be running. The targets are reached with the settings of the experiment file,
as `resume` reaches them: a password the store masked is taken from the
original file while it is unchanged, or else from PGPASSWORD or ~/.pgpass.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab import plan as plan_mod
from perflab import spec as spec_mod
from perflab.errors import UserError
from perflab.secrets import MASK, mask_secrets
from perflab.store import STORE_NAME, Store
from perflab.targets import TARGETS
from perflab.targets.base import Target
from perflab.targets.confine import Owner, format_bytes

_MASKED_KV = re.compile(r"\s*password\s*=\s*" + re.escape(MASK), re.IGNORECASE)
_MASKED_URI = re.compile(r"(://[^/:@\s]*):" + re.escape(MASK) + "@")


@dataclass
class Item:
    """One thing to remove: a recorded leftover, or a target's own data."""

    text: str
    target: Target
    identity: str
    leftover: dict[str, Any] | None = None
    paths: list[Path] = field(default_factory=list)


@dataclass
class Cleanup:
    store: Store
    owner: Owner
    items: list[Item]
    # leftovers whose target is not in the experiment file any more
    unreachable: list[str] = field(default_factory=list)


def _experiment_text(store: Store) -> str:
    info = store.experiment()
    text: str = info["spec_text"]
    if MASK not in text:
        return text
    spec_path = Path(info["spec_path"]) if info["spec_path"] else None
    try:
        original = spec_path.read_text() if spec_path and spec_path.is_file() else None
    except (OSError, UnicodeDecodeError):
        original = None
    if original is not None and mask_secrets(original) == text:
        return original
    # The password is not stored: libpq takes it from PGPASSWORD or ~/.pgpass.
    return _MASKED_URI.sub(r"\1@", _MASKED_KV.sub("", text))


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _refuse_foreign(out_dir: Path, command: str) -> None:
    """A UserError when the output directory or its store is not this user's
    own (or the store is a link): `command` acts only on results of its own."""
    me = os.geteuid()
    for path in (out_dir, out_dir / STORE_NAME):
        try:
            st = os.lstat(path)
        except OSError:
            continue  # none: Store.open says so
        why = ("is a symbolic link" if path != out_dir and os.path.islink(path)
               else f"is owned by {_user(st.st_uid)}" if st.st_uid != me else None)
        if why is not None:
            raise UserError(
                f"{path} {why}, not by this user, {_user(me)}: `perflab {command}` acts only on an output "
                "directory and a store of its own user's (what perflab recorded there decides what it removes, "
                "stops and undoes); nothing was changed",
                f"run `perflab {command}` as its owner, or read it with `perflab show` and `perflab report`")


def own_output_dir(out_dir: Path, command: str) -> tuple[Path, tuple[str, str]]:
    """`out_dir`, absolute, once checked for `resume` and `clean`: this user's
    own, holding a store of this user's that perflab reads (Store.open's
    checks); with the experiment its journals name (the store's path and
    experiment id). A UserError (exit 2) otherwise, before anything is undone."""
    path = Path(out_dir).resolve()
    _refuse_foreign(path, command)
    store = Store.open(path)
    try:
        return path, (str(store.path), store.experiment_id())
    finally:
        store.close()


def _target_dir(out_dir: Path, kind: str, identity: str) -> Path:
    """Where the runner keeps a target's files (Runner._target_dir)."""
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    return out_dir / "targets" / f"{kind}-{digest}"


def prepare(out_dir: Path) -> Cleanup:
    """What `perflab clean` would remove, found without changing anything;
    the experiment's writer lock is held from here (a running experiment is a
    UserError)."""
    _refuse_foreign(Path(out_dir).resolve(), "clean")
    store = Store.open(Path(out_dir).resolve())
    try:
        store.lock()
    except UserError as exc:
        store.close()
        raise UserError(exc.message.replace("; nothing was changed", "") + "; nothing was removed",
                        "wait for it to finish, or stop it (Ctrl-C), then run `perflab clean` again") from None
    info = store.experiment()
    spec_path = Path(info["spec_path"]) if info["spec_path"] else None
    base_dir = spec_path.parent if spec_path and spec_path.parent.is_dir() else Path.cwd()
    try:
        exp = spec_mod.load_text(_experiment_text(store), spec_path, stored=True)
        runs = plan_mod.expand(exp, info["seed"])
    except UserError as exc:
        store.close()
        raise UserError(f"{store.dir}: its experiment cannot be read back to reach its targets: {exc.message}",
                        "run the perflab version that ran it") from None
    targets: dict[str, Target] = {}
    for run in runs:
        settings = exp.resolve(run.factors).target
        cls = TARGETS.get(settings.kind)
        identity = f"{settings.kind}:{cls.identity(settings)}"
        if identity not in targets:
            targets[identity] = cls(settings, _target_dir(store.dir, settings.kind, identity), base_dir.resolve())
    owner = Owner(store.experiment_id(), str(store.dir))
    cleanup = Cleanup(store, owner, [])
    for identity, target in targets.items():
        paths = target.data_locations()
        if paths:
            cleanup.items.append(Item(f"the target's data: {', '.join(map(str, paths))}", target, identity,
                                      paths=paths))
    for row in store.leftovers():
        size = format_bytes(row["bytes"])
        text = f"{row['kind']} {row['name']} in {row['location']} ({size} when measured; {row['detail']})"
        made_by = targets.get(row["target_identity"])
        if made_by is None:
            cleanup.unreachable.append(text)
            continue
        cleanup.items.append(Item(text, made_by, row["target_identity"], leftover=row))
    return cleanup


def remove(cleanup: Cleanup) -> tuple[list[str], list[str]]:
    """Remove every item: (what was removed, what was not and why)."""
    store = cleanup.store
    removed: list[str] = []
    kept: list[str] = []
    for item in cleanup.items:
        if item.leftover is None:
            try:
                freed = item.target.discard_data()
            except Exception as exc:
                kept.append(f"{item.text}: not removed: {exc}")
                continue
            gone = [p for p in item.paths if not p.exists()]
            if gone:
                removed.append(f"removed the target's data: {', '.join(map(str, gone))} ({format_bytes(freed)})")
            left = [p for p in item.paths if p.exists()]
            if left:
                kept.append(f"the target's data: {', '.join(map(str, left))}: not removed (not made by perflab, "
                            "or in use)")
        else:
            row = item.leftover
            try:
                outcome = item.target.remove_leftover(row, cleanup.owner)
            except Exception as exc:
                kept.append(f"{item.text}: not removed: {mask_secrets(str(exc)).strip()}")
                continue
            if outcome.removed:
                store.leftover_removed(row["location"], row["kind"], row["name"])
                removed.append(outcome.text)
            else:
                kept.append(outcome.text)
        # what the experiment had loaded there is gone (or may be): a resume loads it again
        store.set_dataset(item.identity, None, None)
    return removed, kept
