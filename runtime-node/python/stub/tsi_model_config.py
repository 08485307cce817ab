# pb_utils.ModelConfig: the config a model's `auto_complete_config` receives and returns, as
# Triton's JSON form. Only inputs, outputs, max_batch_size, dynamic batching and the transaction
# policy may be changed, with Triton's rules (and error texts) for conflicts with what the
# config.pbtxt already says. Re-exported by triton_python_backend_utils.

import json


class ModelConfig:
    """The config auto_complete_config receives and returns. Only inputs, outputs, max_batch_size,
    dynamic batching and the transaction policy may be changed, with Triton's conflict rules."""

    def __init__(self, model_config):
        self._model_config = json.loads(model_config) if isinstance(model_config, str) else model_config
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self):
        return self._model_config

    def _name(self):
        return self._model_config.get("name", "")

    def set_max_batch_size(self, max_batch_size):
        if self._model_config["max_batch_size"] > max_batch_size:
            raise ValueError(
                "configuration specified max_batch_size " + str(self._model_config["max_batch_size"])
                + ", but in auto-complete-config function for model '" + self._name()
                + "' specified max_batch_size " + str(max_batch_size))
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        found = None
        if "sequence_batching" in self._model_config:
            found = "sequence_batching"
        elif "ensemble_scheduling" in self._model_config:
            found = "ensemble_scheduling"
        if found is not None:
            raise ValueError(
                "Configuration specified scheduling_choice as '" + found + "', but auto-complete-config "
                "function for model '" + self._name() + "' tries to set scheduling_choice as 'dynamic_batching'")
        if "dynamic_batching" not in self._model_config:
            self._model_config["dynamic_batching"] = {}

    def _add(self, kind, tensor, valid):
        for prop in tensor:
            if prop not in valid:
                raise ValueError(
                    kind + " '" + str(tensor.get("name")) + "' in auto-complete-config function for model '"
                    + self._name() + "' contains property other than " + _quoted(valid) + ".")
        for prop in ("name", "data_type", "dims"):
            if prop not in tensor:
                if prop == "name":
                    raise ValueError(kind + " in auto-complete-config function for model '" + self._name()
                                     + "' is missing 'name' property.")
                raise ValueError(kind + " '" + tensor["name"] + "' in auto-complete-config function for model '"
                                 + self._name() + "' is missing '" + prop + "' property.")
        for cur in self._model_config[kind]:
            if cur["name"] != tensor["name"]:
                continue
            if cur.get("data_type", "TYPE_INVALID") != "TYPE_INVALID" and cur["data_type"] != tensor["data_type"]:
                raise ValueError(
                    "unable to load model '" + self._name() + "', configuration expects datatype "
                    + cur["data_type"] + " for " + kind + " '" + tensor["name"] + "', model provides "
                    + tensor["data_type"])
            if cur.get("dims") and list(cur["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    "model '" + self._name() + "', tensor '" + tensor["name"] + "': the model expects dims "
                    + str(tensor["dims"]) + " but the model configuration specifies dims " + str(cur["dims"]))
            if kind == "input" and "optional" in cur and "optional" in tensor and cur["optional"] != tensor["optional"]:
                raise ValueError(
                    "model '" + self._name() + "', tensor '" + tensor["name"] + "': the model expects optional "
                    + str(tensor["optional"]) + " but the model configuration specifies optional "
                    + str(cur["optional"]))
            cur["data_type"] = tensor["data_type"]
            cur["dims"] = tensor["dims"]
            if kind == "input" and "optional" in tensor:
                cur["optional"] = tensor["optional"]
            return
        self._model_config[kind].append(tensor)

    def add_input(self, input):
        self._add("input", input, ["name", "data_type", "dims", "optional"])

    def add_output(self, output):
        self._add("output", output, ["name", "data_type", "dims"])

    def set_model_transaction_policy(self, transaction_policy_dict):
        for prop in transaction_policy_dict.keys():
            if prop != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model '" + self._name()
                    + "' contains property other than 'decoupled'.")
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            if "decoupled" in policy and policy["decoupled"] != transaction_policy_dict["decoupled"]:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model '" + self._name()
                    + "', which is already set to '" + str(policy["decoupled"]) + "'.")
            policy["decoupled"] = transaction_policy_dict["decoupled"]


def _quoted(names):
    q = ["'" + n + "'" for n in names]
    return ", ".join(q[:-1]) + " and " + q[-1]
