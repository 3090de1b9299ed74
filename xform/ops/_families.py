"""The op reference's sections: every built-in op names one (`define_op(family=...)`), and
the reference lists them in this order."""

POINTS_AND_POSES = "Points and poses (cuRobo's curobo.geom.transform)"
CONVERSIONS = "Conversions"
QUATERNION_ALGEBRA = "Quaternion algebra"
SO3 = "SO(3)"
SE3 = "SE(3)"
SIM3 = "Sim(3)"
PLANAR = "SO(2) and SE(2)"
DISTANCES = "Distances"
UTILITIES = "Conversions and utilities"

ORDER = (
    POINTS_AND_POSES,
    CONVERSIONS,
    QUATERNION_ALGEBRA,
    SO3,
    SE3,
    SIM3,
    PLANAR,
    DISTANCES,
    UTILITIES,
)
