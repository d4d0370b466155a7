"""``oellm doctor`` reads the hybridep image's ``OELLM_HYBRID_EP_MULTINODE`` (its DeepEP build setting): a single-node
build is ``ok`` and says which recipes it serves (right for MareNostrum 5's groups within a node, wrong for Jupiter's,
which span nodes: the image cannot know the run's), an unknown value a warning naming the rebuild."""

from __future__ import annotations

import random
import string

from megatron.oellm.doctor.rules import RULES, check_environment, check_hybrid_ep_multinode
from tests.unit_tests.doctor_reports import make_report

VARIABLE = "OELLM_HYBRID_EP_MULTINODE"


def test_a_single_node_build_says_which_recipes_it_serves():
    (finding,) = check_hybrid_ep_multinode(make_report(), {VARIABLE: "0"})
    assert finding.severity == "ok" and f"{VARIABLE}=0" in finding.message
    assert "MareNostrum 5" in finding.message and "Jupiter" in finding.message
    assert "--build-arg HYBRID_EP_MULTINODE=1" in finding.message


def test_another_value_is_reported_as_it_is():
    value = "".join(random.choices(string.ascii_lowercase, k=8))
    (finding,) = check_hybrid_ep_multinode(make_report(), {VARIABLE: value})
    assert finding.severity == "warning" and repr(value) in finding.message
    assert "--build-arg HYBRID_EP_MULTINODE=1" in finding.fix


def test_a_multinode_build_is_ok_and_outside_the_image_nothing_is_said():
    (finding,) = check_hybrid_ep_multinode(make_report(), {VARIABLE: "1"})
    assert finding.severity == "ok"
    assert check_hybrid_ep_multinode(make_report(), {}) == []
    assert check_hybrid_ep_multinode in RULES
    names = [finding.name for finding in check_environment(make_report(), {VARIABLE: "0"})]
    assert names.count("hybrid-ep-multinode") == 1
