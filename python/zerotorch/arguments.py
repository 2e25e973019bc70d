"""``zerotorch.add_config_arguments(parser)``: DeepSpeed's ``deepspeed.add_config_arguments``,
the flags DeepSpeed's launcher and scripts share: ``--deepspeed`` (a flag for the script's own
use), ``--deepspeed_config FILE`` (what ``initialize(args=...)`` reads), and the older
``--deepscale`` / ``--deepscale_config`` (hidden), in one argument group named "DeepSpeed", as
``deepspeed/__init__.py`` (``_add_core_arguments``) adds them. ``--local_rank`` stays the
script's own: DeepSpeed's launcher passes it and scripts declare it; ztrun and torchrun set
``LOCAL_RANK`` instead, which ``engine.local_rank`` reads.
"""

import argparse


def add_config_arguments(parser):
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="Enable DeepSpeed (helper flag for user code, no impact on the "
                            "engine)")
    group.add_argument("--deepspeed_config", default=None, type=str,
                       help="DeepSpeed json configuration file.")
    group.add_argument("--deepscale", default=False, action="store_true",
                       help=argparse.SUPPRESS)
    group.add_argument("--deepscale_config", default=None, type=str, help=argparse.SUPPRESS)
    return parser
