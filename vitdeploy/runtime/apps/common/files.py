"""Which files make one model, checked once, from their metadata, before any is opened or probed.

Each model's application package names the sets of files its predictors take (a :class:`FileSet`: the roles in
order, and the check that the files belong together: ``apps/sam/files.py``, ``apps/sam2/files.py``,
``apps/sam3/files.py``). :meth:`FileSet.check` reads every file's vitdeploy metadata without opening it (an ``.onnx``
file's own, an engine's sidecar, a Runner's) and runs the set's check once: a wrong pair is refused in a second, not
after a first-use probe, a compile or a cluster start. The :class:`ModelFiles` it returns plans the model
(:meth:`ModelFiles.plan`: each file decided, :class:`~vitdeploy.runtime.deploy.plan.ModelPlan`) and opens it; a
file whose metadata cannot be read before it is opened (a damaged engine sidecar) is checked with the others once
open, by the same check. A predictor given a plan opens it and checks nothing again: a plan is made from checked
files only.

The refusal texts for a file of one model where another's belong live here too, for every model's check.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from vitdeploy.errors import InputError
from vitdeploy.runtime.backends.base import Runner
from vitdeploy.runtime.backends.registry import ENGINE_SUFFIXES, ONNX_SUFFIXES
from vitdeploy.runtime.deploy.loader import OpenOptions, metadata_refusal
from vitdeploy.runtime.deploy.plan import ModelPlan, plan_files

#: A file as a caller gives it: a path, or a Runner already open.
FileRef = Union[Runner, str, os.PathLike]
#: role -> metadata: what a set's check reads.
Metadata = Mapping[str, dict[str, Any]]
#: role -> the file in words (``'encoder.onnx'``, or a Runner's name): what a refusal names.
Names = Mapping[str, str]

#: Said where a SAM 2 file reaches what takes SAM 1 files.
SAM2_HERE = ("a SAM 2 file: SAM 2 runs in Sam2ImagePredictor, Sam2VideoPredictor, predict, segment-all --image and "
             "track, serve; embed and segment-all --images take SAM 1 files")
#: Said where a SAM 3 file reaches a predictor or a verb.
SAM3_HERE = ("a SAM 3 file: 'vitdeploy segment-concept' and vitdeploy.runtime.Sam3Processor take SAM 3's vision "
             "encoder, text encoder and detector; predict and vitdeploy.runtime.Sam3InteractivePredictor its vision "
             "encoder and interactive decoder (docs/sam3.md)")


def file_metadata(file: FileRef) -> dict[str, Any] | None:
    """``file``'s vitdeploy metadata, read without opening it: a Runner's, an ``.onnx`` file's (an unreadable one is
    refused in its own words), an engine's sidecar's. None where it cannot be read before opening (no such file, an
    unknown suffix, a damaged sidecar): opening it says why, and the set is checked once it is open."""
    if isinstance(file, Runner):
        return file.metadata
    path = Path(file)
    if not path.is_file():
        return None
    suffix = path.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        from vitdeploy.metadata import read_onnx_metadata

        return read_onnx_metadata(path)
    if suffix in ENGINE_SUFFIXES:
        from vitdeploy.engine.sidecar import read_sidecar

        try:
            found = read_sidecar(path).get("metadata")
        except (InputError, OSError, ValueError):
            return None
        return dict(found) if isinstance(found, dict) else None
    return None


@dataclass(frozen=True)
class FileSet:
    """One set of files that makes a model (module docstring).

    Attributes:
        model: the model, as :func:`vitdeploy.families.model_part` names it (``sam``, ``sam2``, ``sam3``).
        name: what the files make, in words (``SAM's image encoder and decoder``).
        roles: the files' roles, in the order the predictor takes them.
        check: raises InputError unless the files' metadata (role -> metadata) belong together; it names each file
            by ``names`` (role -> ``'file.onnx'``).
        primary: the file a precision policy is for (default: the first role); the others are decided on their own.
    """

    model: str
    name: str
    roles: tuple[str, ...]
    check: Callable[[Metadata, Names], None]
    primary: str = ""

    def check_files(self, files: Mapping[str, FileRef]) -> ModelFiles:
        """``files`` (role -> path or Runner) read and checked (module docstring)."""
        missing = [role for role in self.roles if role not in files]
        if missing or set(files) - set(self.roles):
            raise TypeError(f"{self.name} takes the files {', '.join(self.roles)}, got {', '.join(files)}")
        ordered = {role: files[role] for role in self.roles}
        metadata = {role: file_metadata(file) for role, file in ordered.items()}
        for role, file in ordered.items():  # each file's fields typed as the loader holds them, before the set's check
            if metadata[role] is not None and not isinstance(file, Runner):
                refusal = metadata_refusal(metadata[role], None, None, Path(file).name)
                if refusal is not None:
                    raise InputError(refusal)
        known = all(m is not None for m in metadata.values())
        if known:
            try:
                self.check(metadata, file_names(ordered))  # type: ignore[arg-type]
            except InputError:  # a damaged file is said to be damaged, not to be of another model
                for role, file in ordered.items():
                    refusal = unopenable(file, metadata[role])  # type: ignore[arg-type]
                    if refusal is not None:
                        raise InputError(refusal) from None
                raise
        return ModelFiles(self, ordered, metadata, known)

    def plan(self, files: Mapping[str, FileRef], options: OpenOptions | None = None,
             parts: OpenOptions | None = None) -> ModelPlan:
        """``files`` checked (:meth:`check_files`) and each decided, nothing opened: the plan a route that opens its
        files elsewhere carries (a dataset job's workers, Ray Serve's replicas). A plan is made from checked files
        only: where a file's metadata could not be read unopened, the files are opened here once for the check."""
        model = self.check_files(files)
        plan = model.plan(options or OpenOptions(), parts)
        if not model.checked:
            for runner in model.open(plan).runners.values():
                runner.close()
        return plan

    def open(self, files: Mapping[str, FileRef] | None = None, options: OpenOptions | None = None,
             plan: ModelPlan | None = None) -> OpenModel:
        """The model's runners: from ``plan`` (made from checked files: nothing is checked or decided again), or from
        ``files`` checked (:meth:`check_files`), planned as ``options`` say and opened."""
        if plan is not None:
            if files is not None and any(not isinstance(f, (str, os.PathLike)) for f in files.values()):
                raise InputError("give a plan or the files, not both")
            missing = [role for role in self.roles if role not in plan]
            if missing:
                raise InputError(f"the plan of {plan.model} has no {', '.join(missing)}: {self.name} takes "
                                 f"{', '.join(self.roles)}")
            return OpenModel(self, plan, {role: plan.open(role) for role in self.roles})
        if files is None:
            raise TypeError(f"{self.name}: give the files or a plan")
        model = self.check_files(files)
        return model.open(model.plan(options or OpenOptions()))

    def open_beside(self, role: str, file: FileRef, beside: Metadata, options: OpenOptions | None = None,
                    plan: ModelPlan | None = None) -> OpenModel:
        """One file of the set where the others are known by their metadata only (a server's decoder side: the
        encoder runs elsewhere): checked with them from its metadata before it opens (as :meth:`check_files` checks the
        whole set), decided on its own (never with the primary's precision policy), opened. From ``plan``: opened as
        planned, nothing checked again."""
        if plan is not None:
            return OpenModel(self, plan, {role: plan.open(role)})
        metadata = {**beside, role: file_metadata(file)}
        names = {**{r: f"the {r.replace('_', ' ')}" for r in beside}, **file_names({role: file})}
        if metadata[role] is not None:
            self.check(metadata, names)  # type: ignore[arg-type]
        files = ModelFiles(self, {role: file}, {role: metadata[role]}, True)
        model = files.open(plan_files(self.name, files.paths, (options or OpenOptions()).for_part()))
        if metadata[role] is None:
            self.check({**beside, role: model[role].metadata}, names)
        return model


@dataclass(frozen=True)
class ModelFiles:
    """A model's files (role -> path or Runner, in the set's order) with the metadata read before any was opened;
    ``checked``: the set's check ran on it (every file's metadata was readable)."""

    fileset: FileSet
    files: dict[str, FileRef]
    metadata: dict[str, dict[str, Any] | None]
    checked: bool

    @property
    def paths(self) -> dict[str, str]:
        """The files given as paths (a Runner given is open already: nothing to plan)."""
        return {role: str(f) for role, f in self.files.items() if isinstance(f, (str, os.PathLike))}

    def plan(self, options: OpenOptions, parts: OpenOptions | None = None) -> ModelPlan:
        """Each file given as a path decided as ``options`` say (:func:`~vitdeploy.runtime.deploy.plan.plan_files`):
        the set's primary file with the options' precision policy, every other file on its own (``parts``: other
        options for them, e.g. a decoder replica's one thread)."""
        primary = self.fileset.primary or self.fileset.roles[0]
        return plan_files(self.fileset.name, self.paths, options, primary, parts)

    def open(self, plan: ModelPlan) -> OpenModel:
        """The runners: each path opened as ``plan`` says, each Runner as given; the set's check on the runners'
        metadata where it could not run before (once)."""
        runners: dict[str, Runner] = {}
        try:
            for role, file in self.files.items():
                runners[role] = file if isinstance(file, Runner) else plan.open(role)
            if not self.checked:
                self.fileset.check({role: runner.metadata for role, runner in runners.items()}, file_names(self.files))
        except BaseException:
            for role, runner in runners.items():
                if not isinstance(self.files[role], Runner):
                    runner.close()
            raise
        return OpenModel(self.fileset, plan, runners)


@dataclass(frozen=True)
class OpenModel:
    """A model's runners by role, the set of files they are, and the plan they were opened from (what the route passes
    on)."""

    fileset: FileSet
    plan: ModelPlan
    runners: dict[str, Runner]

    def __getitem__(self, role: str) -> Runner:
        return self.runners[role]


def unopenable(file: FileRef, metadata: dict[str, Any]) -> str | None:
    """Why the loader would refuse to open ``file`` (a path: its external weights missing, its metadata against its
    graph), in the loader's words, or None. Asked only when a set's check fails, so that a file that cannot be opened
    is named as such first, not as a file of another model: reading the graph costs what reading the metadata does
    not. A Runner given is open already: None."""
    if isinstance(file, Runner):
        return None
    path = Path(file)
    if path.suffix.lower() not in ONNX_SUFFIXES:
        return None
    from vitdeploy.engine.onnx_facts import read_onnx_facts

    try:
        facts = read_onnx_facts(path)
    except InputError as exc:  # not a readable graph, or its weights' file missing
        return str(exc)
    return metadata_refusal(metadata, {t.name: list(t.dims) for t in facts.inputs}, [t.name for t in facts.outputs],
                            path.name)


def file_names(files: Mapping[str, FileRef]) -> dict[str, str]:
    """role -> the file in words: ``'name.onnx'`` for a path, the runner's own for a Runner."""
    def named(f: FileRef) -> str:
        path = Path(f) if isinstance(f, (str, os.PathLike)) else f.path
        return f"'{path.name}'" if path is not None else f.name

    return {role: named(f) for role, f in files.items()}


def is_onnx_file(path: Any) -> bool:
    """Whether ``path`` names an existing ``.onnx`` file (a Runner, an engine or a missing file: no)."""
    return isinstance(path, (str, os.PathLike)) and Path(path).suffix.lower() in ONNX_SUFFIXES and Path(path).is_file()


__all__ = ["FileRef", "FileSet", "Metadata", "ModelFiles", "Names", "OpenModel", "SAM2_HERE", "SAM3_HERE",
           "file_metadata", "file_names", "is_onnx_file", "unopenable"]
