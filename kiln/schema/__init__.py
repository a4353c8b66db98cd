"""The data models: Recipe, Thresholds and Manifest, each with a schema_version.

Every model forbids unknown keys and describes every field; the descriptions feed
the error messages, the editor JSON Schema and the site.

Importing this module builds every model (pydantic), which `doit check` pays for on
a cold catalog: annotations are objects, not strings (no `from __future__ import
annotations`), so pydantic does not compile and evaluate each one, and empty
defaults come from plain functions, not from `dict` and `list`, whose signatures
inspect would read by tokenizing their text (a 10 ms regex compile).

One module per kind of file, each importing only those above it:

  vocabulary.py  the base model, pinned names and ids, verdicts, scopes, the metrics table
  recipe.py      recipes/*.yaml: sources, precisions, execution variants, build, validation
  thresholds.py  thresholds/*.yaml and prompts/*.yaml: gates and prompt sets
  manifest.py    manifests/*.json: the lock and the evidence records

Every name is re-exported here: `from kiln.schema import Recipe` is how the rest of
kiln reads them.
"""

from kiln.schema.manifest import (
    CheckpointLock as CheckpointLock,
)
from kiln.schema.manifest import (
    ChunkLock as ChunkLock,
)
from kiln.schema.manifest import (
    Evidence as Evidence,
)
from kiln.schema.manifest import (
    FeatureName as FeatureName,
)
from kiln.schema.manifest import (
    FeatureProof as FeatureProof,
)
from kiln.schema.manifest import (
    FileHash as FileHash,
)
from kiln.schema.manifest import (
    GateResult as GateResult,
)
from kiln.schema.manifest import (
    GatesRef as GatesRef,
)
from kiln.schema.manifest import (
    Host as Host,
)
from kiln.schema.manifest import (
    ImportLock as ImportLock,
)
from kiln.schema.manifest import (
    Lock as Lock,
)
from kiln.schema.manifest import (
    Manifest as Manifest,
)
from kiln.schema.manifest import (
    Recorded as Recorded,
)
from kiln.schema.manifest import (
    StepLock as StepLock,
)
from kiln.schema.recipe import (
    BACKENDS as BACKENDS,
)
from kiln.schema.recipe import (
    COMPUTE as COMPUTE,
)
from kiln.schema.recipe import (
    FAMILY as FAMILY,
)
from kiln.schema.recipe import (
    KV_CACHE as KV_CACHE,
)
from kiln.schema.recipe import (
    TARGETS as TARGETS,
)
from kiln.schema.recipe import (
    TASKS as TASKS,
)
from kiln.schema.recipe import (
    VARIANTS as VARIANTS,
)
from kiln.schema.recipe import (
    WEIGHTS as WEIGHTS,
)
from kiln.schema.recipe import (
    Build as Build,
)
from kiln.schema.recipe import (
    Calibration as Calibration,
)
from kiln.schema.recipe import (
    Checkpoint as Checkpoint,
)
from kiln.schema.recipe import (
    Chunk as Chunk,
)
from kiln.schema.recipe import (
    ChunkWheel as ChunkWheel,
)
from kiln.schema.recipe import (
    Companion as Companion,
)
from kiln.schema.recipe import (
    Dflash as Dflash,
)
from kiln.schema.recipe import (
    Distribution as Distribution,
)
from kiln.schema.recipe import (
    Draft as Draft,
)
from kiln.schema.recipe import (
    Dspark as Dspark,
)
from kiln.schema.recipe import (
    Eagle3 as Eagle3,
)
from kiln.schema.recipe import (
    ExactVersion as ExactVersion,
)
from kiln.schema.recipe import (
    Execution as Execution,
)
from kiln.schema.recipe import (
    InnerPath as InnerPath,
)
from kiln.schema.recipe import (
    Lora as Lora,
)
from kiln.schema.recipe import (
    Mtp as Mtp,
)
from kiln.schema.recipe import (
    Ngram as Ngram,
)
from kiln.schema.recipe import (
    Ordinary as Ordinary,
)
from kiln.schema.recipe import (
    Package as Package,
)
from kiln.schema.recipe import (
    Precision as Precision,
)
from kiln.schema.recipe import (
    PromptPolicy as PromptPolicy,
)
from kiln.schema.recipe import (
    Recipe as Recipe,
)
from kiln.schema.recipe import (
    Source as Source,
)
from kiln.schema.recipe import (
    Tag as Tag,
)
from kiln.schema.recipe import (
    Validation as Validation,
)
from kiln.schema.recipe import (
    pin_described as pin_described,
)
from kiln.schema.recipe import (
    pin_label as pin_label,
)
from kiln.schema.recipe import (
    pin_title as pin_title,
)
from kiln.schema.thresholds import (
    Gate as Gate,
)
from kiln.schema.thresholds import (
    PromptSet as PromptSet,
)
from kiln.schema.thresholds import (
    Thresholds as Thresholds,
)
from kiln.schema.vocabulary import (
    METRICS as METRICS,
)
from kiln.schema.vocabulary import (
    PATTERN_HELP as PATTERN_HELP,
)
from kiln.schema.vocabulary import (
    SAMPLE_SIZE as SAMPLE_SIZE,
)
from kiln.schema.vocabulary import (
    UNITS as UNITS,
)
from kiln.schema.vocabulary import (
    VERDICTS as VERDICTS,
)
from kiln.schema.vocabulary import (
    Name as Name,
)
from kiln.schema.vocabulary import (
    RepoId as RepoId,
)
from kiln.schema.vocabulary import (
    Revision as Revision,
)
from kiln.schema.vocabulary import (
    SchemaVersion as SchemaVersion,
)
from kiln.schema.vocabulary import (
    Scope as Scope,
)
from kiln.schema.vocabulary import (
    Sha256 as Sha256,
)
from kiln.schema.vocabulary import (
    Strict as Strict,
)
from kiln.schema.vocabulary import (
    Verdict as Verdict,
)
