"""Every table of the service, imported in one place for Alembic's autogenerate and the checks."""

from app.catalog.models import CustomCluster, CustomModel
from app.core.db import Base
from app.jobs.models import Job, JobPoint
from app.plans.models import Plan, PlanCandidate
from app.profiles.models import Profile
from app.sweeps.models import Sweep, SweepPoint
from app.tokens.models import ApiToken

__all__ = ["ApiToken", "Base", "CustomCluster", "CustomModel", "Job", "JobPoint", "Plan", "PlanCandidate", "Profile", "Sweep", "SweepPoint"]
