# Owner(s): ["module: inductor"]
"""The overlay registry: atomic enable, exact restore, drift refusal, kill switch."""
import os
from unittest import mock

from torch._inductor.test_case import run_tests, TestCase

import torch_overlay
from torch_overlay._registry import fingerprint, Hook, Overlay, OverlayError, REGISTRY, source_of


# Stand-ins for upstream functions: the toy overlays below patch these.
def upstream_lowering(x):
    return x + 1


def upstream_codegen(x):
    return x * 2


UPSTREAM_TABLE = {"mm": upstream_lowering}


class Base:
    def _describe(self):
        return "base"

    describe = _describe


class Child(Base):
    pass


def toy_overlay(name, *hooks, validated=None, requires=()):
    hooks = hooks or (Hook(owner=__name__, attr="upstream_lowering",
                           build=lambda original: lambda x: original(x) * 10),)
    if validated is None:
        validated = {torch_overlay._registry.torch_version():
                     {h.target: fingerprint(h.upstream_source()) for h in hooks}}
    return REGISTRY.register(Overlay(name=name, purpose="toy", hooks=hooks,
                                     validated=validated, requires=requires,
                                     modules=(__name__,)))


class TestRegistry(TestCase):
    def setUp(self):
        super().setUp()
        self.names = []
        self.env = mock.patch.dict(os.environ)
        self.env.start()
        for var in ("TORCH_OVERLAY", "TORCH_OVERLAY_DISABLE", "TORCH_OVERLAY_FORCE"):
            os.environ.pop(var, None)
        self.originals = (upstream_lowering, upstream_codegen, dict(UPSTREAM_TABLE))

    def tearDown(self):
        for name in self.names:
            REGISTRY.unregister(name)
        self.env.stop()
        super().tearDown()

    def state_of(self, name):
        (state,) = [o.state for o in torch_overlay.status().overlays if o.name == name]
        return state

    def toy(self, name, *hooks, **kwargs):
        self.names.append(name)
        return toy_overlay(name, *hooks, **kwargs)

    def test_enable_patches_and_disable_restores_exact_objects(self):
        self.toy("toy_a")
        torch_overlay.enable("toy_a")
        self.assertEqual(globals()["upstream_lowering"](1), 20)
        torch_overlay.disable("toy_a")
        self.assertIs(globals()["upstream_lowering"], self.originals[0])
        self.assertEqual(upstream_lowering(1), 2)

    def test_enable_is_idempotent(self):
        self.toy("toy_a")
        torch_overlay.enable("toy_a")
        patched = globals()["upstream_lowering"]
        torch_overlay.enable("toy_a")
        self.assertIs(globals()["upstream_lowering"], patched)
        self.assertEqual(patched(1), 20)  # wrapped once, not twice
        torch_overlay.disable()
        self.assertIs(globals()["upstream_lowering"], self.originals[0])

    def test_mapping_item_hook(self):
        hook = Hook(owner=f"{__name__}.UPSTREAM_TABLE", key=lambda: "mm", key_repr="'mm'",
                    build=lambda original: lambda x: -original(x))
        self.toy("toy_table", hook)
        torch_overlay.enable("toy_table")
        self.assertEqual(UPSTREAM_TABLE["mm"](1), -2)
        torch_overlay.disable("toy_table")
        self.assertIs(UPSTREAM_TABLE["mm"], upstream_lowering)

    def test_enable_is_atomic(self):
        good = Hook(owner=__name__, attr="upstream_codegen", build=lambda o: lambda x: 0)

        def broken_build(original):
            raise ValueError("template failed to build")

        bad = Hook(owner=__name__, attr="upstream_lowering", build=broken_build)
        self.toy("toy_broken", good, bad)
        with self.assertRaisesRegex(OverlayError, rf"toy_broken.*{__name__}\.upstream_lowering"):
            torch_overlay.enable("toy_broken")
        # the hook that succeeded before the failure is undone
        self.assertIs(globals()["upstream_codegen"], self.originals[1])
        self.assertIs(globals()["upstream_lowering"], self.originals[0])
        self.assertNotIn("toy_broken", REGISTRY.enabled())

    def test_missing_target_is_refused_with_its_name(self):
        hook = Hook(owner=__name__, attr="no_such_function")
        self.toy("toy_missing", hook, validated={})
        with self.assertRaisesRegex(OverlayError, rf"{__name__}\.no_such_function"):
            torch_overlay.enable("toy_missing")

    def test_drift_is_refused_unless_forced(self):
        hook = Hook(owner=__name__, attr="upstream_lowering", build=lambda o: lambda x: 0)
        version = torch_overlay._registry.torch_version()
        self.toy("toy_drift", hook, validated={version: {hook.target: "0123456789abcdef"}})
        with self.assertRaises(OverlayError) as ctx:
            torch_overlay.enable("toy_drift")
        message = str(ctx.exception)
        self.assertIn(hook.target, message)
        self.assertIn(version, message)
        self.assertIn(fingerprint(source_of(upstream_lowering)), message)
        self.assertIs(globals()["upstream_lowering"], self.originals[0])
        self.assertEqual(self.state_of("toy_drift"), "refused")
        torch_overlay.enable("toy_drift", force=True)
        self.assertEqual(globals()["upstream_lowering"](1), 0)
        torch_overlay.disable()

    def test_unvalidated_torch_version_is_refused(self):
        hook = Hook(owner=__name__, attr="upstream_lowering")
        self.toy("toy_old", hook, validated={"1.13.0": {hook.target: "0123456789abcdef"}})
        with self.assertRaisesRegex(OverlayError, "not validated on this version.*1.13.0"):
            torch_overlay.enable("toy_old")
        os.environ["TORCH_OVERLAY_FORCE"] = "1"
        torch_overlay.enable("toy_old")
        self.assertIn("toy_old", REGISTRY.enabled())
        torch_overlay.disable()

    def test_kill_switch(self):
        self.toy("toy_a")
        os.environ["TORCH_OVERLAY_DISABLE"] = "1"
        self.assertEqual(torch_overlay.enable("toy_a"), [])
        self.assertIs(globals()["upstream_lowering"], self.originals[0])
        self.assertEqual(self.state_of("toy_a"), "killed")

    def test_env_selects_overlays(self):
        self.toy("toy_a")
        self.toy("toy_b", Hook(owner=__name__, attr="upstream_codegen", build=lambda o: lambda x: 7))
        os.environ["TORCH_OVERLAY"] = "toy_b"
        self.assertEqual(torch_overlay.enable(), ["toy_b"])
        self.assertIs(globals()["upstream_lowering"], self.originals[0])
        self.assertEqual(globals()["upstream_codegen"](1), 7)
        torch_overlay.disable()

    def test_redeclaration_by_the_same_module_keeps_the_first(self):
        first = self.toy("toy_a")
        hook = Hook(owner=__name__, attr="upstream_codegen", build=lambda o: lambda x: 0)
        again = Overlay(name="toy_a", purpose="toy", hooks=(hook,), validated={},
                        modules=first.modules)
        self.assertIs(REGISTRY.register(again), first)  # a reloaded module
        other = Overlay(name="toy_a", purpose="toy", hooks=(hook,), validated={},
                        modules=("somewhere.else",))
        with self.assertRaisesRegex(OverlayError, "'toy_a' is declared twice"):
            REGISTRY.register(other)

    def test_unknown_name(self):
        with self.assertRaisesRegex(OverlayError, "unknown overlay 'nope'"):
            torch_overlay.enable("nope")

    def test_requirements_enable_first_and_disable_with_dependants(self):
        self.toy("toy_base")
        self.toy("toy_top", Hook(owner=__name__, attr="upstream_codegen",
                                 build=lambda o: lambda x: 3), requires=("toy_base",))
        self.assertEqual(torch_overlay.enable("toy_top"), ["toy_base", "toy_top"])
        torch_overlay.disable("toy_base")
        self.assertEqual(REGISTRY.enabled(), [])
        self.assertIs(globals()["upstream_codegen"], self.originals[1])

    def test_pass_hooks_carry_cache_key_only_while_enabled(self):
        import torch._inductor.config as inductor_config

        user_pass = inductor_config.post_grad_custom_post_pass
        self.toy("toy_a")
        torch_overlay.enable("toy_a")
        hooked = inductor_config.post_grad_custom_post_pass
        key_a = hooked.uuid()
        self.assertIsNotNone(key_a)
        self.toy("toy_b", Hook(owner=__name__, attr="upstream_codegen", build=lambda o: o))
        torch_overlay.enable("toy_b")
        self.assertNotEqual(hooked.uuid(), key_a)  # the enabled set is in the key
        torch_overlay.disable()
        self.assertIs(inductor_config.post_grad_custom_post_pass, user_pass)

    def test_depends_on_fingerprints_without_patching(self):
        hook = Hook.depends_on(f"{__name__}.upstream_codegen")
        self.toy("toy_dep", hook)
        torch_overlay.enable("toy_dep")
        self.assertIs(globals()["upstream_codegen"], self.originals[1])
        self.assertEqual(REGISTRY.check("toy_dep")[0].target, f"{__name__}.upstream_codegen")
        torch_overlay.disable()

    def test_inherited_attribute_is_removed_not_shadowed(self):
        hook = Hook(owner=f"{__name__}.Child", attr="describe",
                    build=lambda original: lambda self: "patched")
        self.toy("toy_inherited", hook)
        torch_overlay.enable("toy_inherited")
        self.assertEqual(Child().describe(), "patched")
        torch_overlay.disable()
        self.assertNotIn("describe", vars(Child))
        Base.describe = lambda self: "base, later patched"  # still reaches the child
        try:
            self.assertEqual(Child().describe(), "base, later patched")
        finally:
            Base.describe = Base._describe

    def test_overlays_listed_in_module_order_not_import_order(self):
        # pytest imports test_gelu_add.py (and so gelu_add) before the others
        names = torch_overlay.load_overlays()
        REGISTRY.order_by_modules(reversed(torch_overlay.OVERLAY_MODULES))
        self.assertEqual(REGISTRY.names[:len(names)], names[::-1])
        self.assertEqual(torch_overlay.load_overlays(), names)

    def test_status_lists_every_declared_overlay(self):
        self.toy("toy_a")
        status = torch_overlay.status()
        names = [o.name for o in status.overlays]
        self.assertEqual(names, REGISTRY.names)
        self.assertIn("toy_a: inactive", str(status))


if __name__ == "__main__":
    run_tests()
