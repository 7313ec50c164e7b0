"""vllm.utils.argparse_utils (test double): FlexibleArgumentParser as real vLLM names it.

Like the real class: accepts `--max_model_len` for `--max-model-len` (underscores in flag names
become dashes), ignores the `deprecated=` keyword, and fails with exit 2 on unknown flags.

Laid out as vLLM 0.33.0 (vllm.__version__, see layout.py), it does what 0.33.0's class does:
every ``action=BooleanOptionalAction`` becomes EnableDisableAction, so `--enable-X` also parses
as `--disable-X` (and the reverse), the `--no-...` spellings still parse. 0.27.1 has neither.
"""

import argparse
import sys

from vllm._double import release

# vLLM 0.33.0 registers EnableDisableAction in place of BooleanOptionalAction.
ENABLE_DISABLE_SINCE = (0, 33)


class EnableDisableAction(argparse.BooleanOptionalAction):
    """`BooleanOptionalAction` that pairs `--enable-x` with `--disable-x` (vLLM 0.33.0's, same
    name): `--no-enable-x` and `--no-disable-x` still parse."""

    _inverse_prefixes = {"--enable-": "--disable-", "--disable-": "--enable-"}

    def __init__(self, option_strings, dest, *args, **kwargs):
        super().__init__(option_strings, dest, *args, **kwargs)
        inverses = [inverse + opt[len(prefix):]
                    for opt in option_strings
                    for prefix, inverse in self._inverse_prefixes.items()
                    if opt.startswith(prefix)]
        negated = {opt for opt in self.option_strings if opt not in option_strings}
        self.negative_option_strings = negated | set(inverses)
        self.option_strings = [*self.option_strings, *inverses]

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string not in self.negative_option_strings)


class FlexibleArgumentParser(argparse.ArgumentParser):
    """ArgumentParser that allows both underscore and dash in flag names (test double)."""

    def __init__(self, *args, **kwargs):
        kwargs.pop("add_json_tip", None)
        super().__init__(*args, **kwargs)
        if release() >= ENABLE_DISABLE_SINCE:
            self.register("action", argparse.BooleanOptionalAction, EnableDisableAction)

    def add_argument(self, *args, **kwargs):
        kwargs.pop("deprecated", None)
        return super().add_argument(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        if args is None:
            args = sys.argv[1:]
        processed = []
        for arg in args:
            if arg.startswith("--") and arg != "--":
                key, sep, value = arg.partition("=")
                head, dot, tail = key[2:].partition(".")
                processed.append("--" + head.replace("_", "-") + dot + tail + sep + value)
            else:
                processed.append(arg)
        return super().parse_args(processed, namespace)
