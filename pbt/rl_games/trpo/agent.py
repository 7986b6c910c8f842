"""The TRPO agent for rl_games (algo name ``trpo``): rl_games' continuous actor-critic with TRPO's update.

Everything but the update is rl_games' own ``a2c_continuous`` machinery: the rollout
(``play_steps`` / ``play_steps_rnn``), GAE with time-out bootstrapping (``value_bootstrap``),
input and value normalisation, the minibatch dataset, checkpoints and observer hooks, so PBT, play,
replay and analyze work unchanged. The update (:meth:`TrpoAgent.train_epoch`) is:

1. refresh the input normaliser once on the batch, normalise advantages (rl_games' ``prepare_dataset``);
2. policy: the surrogate's gradient g on the whole batch, the search direction x ~ H^-1 g by conjugate
   gradient on Fisher-vector products of the mean KL, the full step sqrt(2 delta / x^T H x) x, and a
   backtracking line search (:mod:`pbt.rl_games.trpo.optim`); recurrent policies are unrolled over
   their stored sequences, so KL and Fisher products are sequence-aware;
3. value function: ``learning_epochs`` x ``mini_batches`` Adam steps on ``value_loss_scale * (R - V)^2``
   with the gradient's norm clipped to ``grad_norm_clip``.

The network must have separate actor and critic (``network.separate: True``): TRPO steps the policy's
parameters only, and the value function's are fitted by their own optimizer (the checkpoint's
``optimizer``). Under ``multi_gpu`` every rank averages gradients, Fisher products, losses and KLs
(:mod:`pbt.rl_games.trpo.spmd`), so all ranks take the same step.
"""

import logging
import time
from typing import Any, Dict, List, Tuple

import torch
from rl_games.algos_torch import a2c_continuous
from rl_games.common import a2c_common, datasets

from pbt.errors import ConfigError
from pbt.rl_games.trpo import optim, spmd
from pbt.rl_games.trpo.schedule import build_scheduler
from pbt.rl_games.trpo.settings import TrpoSettings

log = logging.getLogger(__name__)

#: Parameter-name prefixes of the value function in rl_games' separate actor_critic network.
VALUE_PREFIXES = (
    "a2c_network.critic_mlp",
    "a2c_network.value",
    "a2c_network.c_rnn",
    "a2c_network.c_layer_norm",
    "a2c_network.critic_cnn",
)


class TrpoAgent(a2c_continuous.A2CAgent):
    """rl_games' continuous agent with TRPO's policy update and a separate value optimizer."""

    # set by rl_games' base class (untyped); declared so the assignments below have a type
    last_lr: float
    entropy_coef: float

    def __init__(self, base_name: str, params: Dict[str, Any]) -> None:
        self.trpo = TrpoSettings.from_config(params["config"])
        params = {**params, "config": self.trpo.rl_games_config(params["config"])}
        if params["config"].get("central_value_config") is not None:
            raise ConfigError(
                "the trpo learner has no central value network: remove "
                "train.params.config.central_value_config (or train with a2c_continuous)."
            )
        distributed = spmd.start(params["config"])  # rl_games would start NCCL only; gloo serves CPUs
        a2c_common.ContinuousA2CBase.__init__(self, base_name, params)
        if distributed is not None:
            spmd.adopt(self, distributed)
        self.model = self.network.build(
            {
                "actions_num": self.actions_num,
                "input_shape": self.obs_shape,
                "num_seqs": self.num_actors * self.num_agents,
                "value_size": self.env_info.get("value_size", 1),
                "normalize_value": self.normalize_value,
                "normalize_input": self.normalize_input,
            }
        )
        self.model.to(self.ppo_device)
        self.states = None
        self.init_rnn_from_model(self.model)
        self.last_lr = float(self.last_lr)
        self.policy_params, self.value_params = optim.split_parameters(
            list(self.model.named_parameters()), VALUE_PREFIXES
        )
        if not self.value_params or not self.policy_params or not getattr(self.model.a2c_network, "separate", False):
            raise ConfigError(
                "the trpo learner needs separate actor and critic networks: set "
                "train.params.network.separate=True (TRPO steps the policy's parameters only)."
            )
        # The checkpoint's 'optimizer' is the value function's (the policy has no optimizer state).
        self.optimizer = torch.optim.Adam(self.value_params, self.last_lr, eps=1e-8, weight_decay=self.weight_decay)
        self.bound_loss_type = None
        self.use_experimental_cv = True
        self.has_value_loss = True
        self.dataset = datasets.PPODataset(
            self.batch_size, self.minibatch_size, self.is_discrete, self.is_rnn, self.ppo_device, self.seq_length
        )
        if self.normalize_value:
            self.value_mean_std = self.model.value_mean_std
        log.info(
            "trpo: max_kl_divergence=%g, value function in %d minibatches of %d samples x %d epochs",
            self.trpo.max_kl_divergence,
            self.batch_size // self.minibatch_size,
            self.minibatch_size,
            self.mini_epochs_num,
        )
        self.scheduler = build_scheduler(self.trpo, int(self.max_epochs), int(self.max_frames))
        self.rollout_step = 0  # env steps of the current rollout (random_timesteps counts env steps)
        if (
            self.trpo.random_timesteps
            and not self.clip_actions
            and not bool(torch.isfinite(torch.cat([self.actions_low, self.actions_high])).all())
        ):
            raise ConfigError(
                "train.params.config.random_timesteps needs a bounded action space to draw from, "
                "or clip_actions=True (actions in [-1, 1], rescaled to the bounds)."
            )
        self.last_step: Dict[str, float] = {}
        #: Bumped whenever PBT changes this agent in place (rank 0 of a distributed run broadcasts it).
        self.generation = 0
        self.algo_observer.after_init(self)

    # -- network surgery (pbt/mutation=agilerl) ----------------------------------------------------
    def optimizer_parameters(self, model: torch.nn.Module) -> List[torch.nn.Parameter]:
        """What the optimizer of ``model`` steps: the value function's parameters (surgery builds the
        new optimizer from these; TRPO steps the policy itself)."""
        return optim.split_parameters(list(model.named_parameters()), VALUE_PREFIXES)[1]

    def model_changed(self) -> None:
        """Surgery swapped ``self.model``: the policy step and the value optimizer must follow it, or
        the update differentiates the old model's parameters (zero gradients) and the policy freezes."""
        self.policy_params, self.value_params = optim.split_parameters(
            list(self.model.named_parameters()), VALUE_PREFIXES
        )

    # -- one epoch ---------------------------------------------------------------------------------
    def train_epoch(self) -> Tuple[Any, ...]:
        """Roll out, then one TRPO update; returns what rl_games' ``train`` loop logs."""
        a2c_common.A2CBase.train_epoch(self)
        spmd.follow_rank0(self)  # a PBT decision carried out on rank 0 reaches every rank
        self.set_eval()
        play_start = time.perf_counter()
        self.rollout_step = 0
        with torch.no_grad():
            batch = self.play_steps_rnn() if self.is_rnn else self.play_steps()
        play_end = time.perf_counter()
        self.set_train()
        self.curr_frames = batch.pop("played_frames")
        self._refresh_input_normalizer(batch["obses"])
        self.prepare_dataset(batch)
        self.algo_observer.after_steps()
        if self.env_steps() + self.rollout_step <= self.trpo.learning_starts:  # skrl: no update before learning_starts
            if self.normalize_value:
                spmd.average_buffers(self, self.model.value_mean_std)
            self.last_step = {
                "accepted": 0.0,
                "step_fraction": 0.0,
                "kl": 0.0,
                "surrogate_gain": 0.0,
                "line_search_tries": 0.0,
            }
            zero = [torch.zeros((), device=self.ppo_device)]  # rl_games logs the means of these lists
            end = time.perf_counter()
            return (
                batch["step_time"],
                play_end - play_start,
                end - play_end,
                end - play_start,
                zero,
                zero,
                [],
                zero,
                zero,
                self.last_lr,
                1.0,
            )
        data = self.dataset.values_dict
        surrogate, kl, entropy = self.update_policy(data)
        value_losses = self.update_value()
        if self.normalize_value:
            spmd.average_buffers(self, self.model.value_mean_std)
        spmd.verify_in_step(self, float(batch["actions"].double().sum()))
        end = time.perf_counter()
        if self.writer is not None:
            for name, value in self.last_step.items():
                self.writer.add_scalar(f"trpo/{name}", value, self.frame)
        return (
            batch["step_time"],
            play_end - play_start,
            end - play_end,
            end - play_start,
            [-surrogate],
            value_losses,
            [],
            [entropy],
            [kl],
            self.last_lr,
            1.0,
        )

    def env_steps(self) -> int:
        """Env steps (each a step of every env) before the current rollout, from the frame count."""
        return int(self.frame) // max(1, int(self.num_actors) * int(self.num_agents))

    def get_action_values(self, obs: Any) -> Dict[str, torch.Tensor]:
        """The policy's actions, or for the first ``random_timesteps`` env steps uniform random ones (their
        log-probability under the policy is recorded, so the ratios of an update on them are exact)."""
        res = super().get_action_values(obs)
        step = self.env_steps() + self.rollout_step
        self.rollout_step += 1
        if step >= self.trpo.random_timesteps:
            return res
        mus, sigmas = res["mus"], res["sigmas"]
        noise = torch.rand_like(mus)
        low, high = (-1.0, 1.0) if self.clip_actions else (self.actions_low, self.actions_high)
        actions = low + (high - low) * noise
        res["actions"] = actions
        res["neglogpacs"] = torch.squeeze(self.model.neglogp(actions, mus, sigmas, torch.log(sigmas)))
        return res

    def _refresh_input_normalizer(self, obs: torch.Tensor) -> None:
        # Once per batch, before the update (which keeps it fixed).
        if self.normalize_input:
            self.model.running_mean_std.train()
            with torch.no_grad():
                self.model.running_mean_std(self._preproc_obs(obs))
            spmd.average_buffers(self, self.model.running_mean_std)

    def _forward(self, data: Dict[str, Any]) -> Dict[str, torch.Tensor]:
        """The model on a whole batch or a minibatch (recurrent: unrolled from each sequence's stored state).
        The input normaliser stays fixed: the update's many evaluations must see one input map."""
        if hasattr(self.model, "running_mean_std"):
            self.model.running_mean_std.eval()
        batch = {"is_train": True, "prev_actions": data["actions"], "obs": self._preproc_obs(data["obs"])}
        if self.is_rnn:
            batch["rnn_states"] = data["rnn_states"]
            batch["seq_length"] = self.seq_length
            if self.zero_rnn_on_done:
                batch["dones"] = data["dones"]
        return self.model(batch)

    # -- the policy step ---------------------------------------------------------------------------
    def update_policy(self, data: Dict[str, Any]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One trust-region step of the policy on the whole batch; (surrogate, KL, entropy) after it."""
        cfg = self.trpo
        params = self.policy_params
        advantages = data["advantages"]
        old_logp = -data["old_logp_actions"]
        res = self._forward(data)
        mu_old, sigma_old = res["mus"].detach(), res["sigmas"].detach()
        surrogate = (advantages * torch.exp(-res["prev_neglogp"] - old_logp)).mean()
        mean_kl = optim.gaussian_kl(mu_old, sigma_old, res["mus"], res["sigmas"]).mean()
        stride = cfg.fisher_stride()
        if stride > 1:  # the Fisher products on every stride-th sample (sequence): its own graph
            sub = self._forward(self._every(data, stride))
            mean_kl = optim.gaussian_kl(sub["mus"].detach(), sub["sigmas"].detach(), sub["mus"], sub["sigmas"]).mean()
        reduce = spmd.averager(self)
        grad = optim.flat_grad(surrogate, params, retain_graph=True)
        grad = reduce(grad) if reduce is not None else grad
        hvp = optim.fisher_vector_product(mean_kl, params, cfg.damping, reduce)
        direction = optim.conjugate_gradient(hvp, grad, cfg.conjugate_gradient_steps, cfg.conjugate_gradient_tolerance)
        step = optim.full_step(direction, hvp, cfg.max_kl_divergence)
        surrogate_before = spmd.mean_scalar(self, surrogate.detach())

        def evaluate() -> Tuple[float, float]:
            with torch.no_grad():
                new = self._forward(data)
                value = (advantages * torch.exp(-new["prev_neglogp"] - old_logp)).mean()
                kl = optim.gaussian_kl(mu_old, sigma_old, new["mus"], new["sigmas"]).mean()
            return spmd.mean_scalar(self, value), spmd.mean_scalar(self, kl)

        result = optim.line_search(
            params,
            step,
            float(torch.dot(grad, step)),
            evaluate,
            surrogate_before,
            cfg.max_kl_divergence,
            cfg.step_fraction,
            cfg.max_backtrack_steps,
            cfg.accept_ratio,
        )
        self.last_step = {
            "accepted": float(result.accepted),
            "step_fraction": result.fraction,
            "kl": result.kl if result.accepted else 0.0,
            "surrogate_gain": result.improvement,
            "line_search_tries": float(result.tries),
        }
        with torch.no_grad():
            entropy = self._forward(data)["entropy"].mean()
        gain = result.improvement if result.accepted else 0.0
        return (torch.tensor(surrogate_before + gain), torch.tensor(self.last_step["kl"]), entropy)

    def _every(self, data: Dict[str, Any], stride: int) -> Dict[str, Any]:
        """Every ``stride``-th sample of a batch; for a recurrent policy every ``stride``-th whole sequence
        (with its stored state), so the subsample is still unrolled as it was played."""
        if not self.is_rnn:
            return {key: data[key][::stride] for key in ("obs", "actions")}
        n = self.seq_length

        def seqs(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(-1, n, *t.shape[1:])[::stride].reshape(-1, *t.shape[1:])

        return {
            "obs": seqs(data["obs"]),
            "actions": seqs(data["actions"]),
            "dones": seqs(data["dones"]),
            "rnn_states": [s[:, ::stride] for s in data["rnn_states"]],
        }

    # -- the value function ------------------------------------------------------------------------
    def update_value(self) -> List[torch.Tensor]:
        """``learning_epochs`` passes of Adam over the minibatches on the value loss; the losses."""
        losses: List[torch.Tensor] = []
        for _ in range(self.mini_epochs_num):
            for index in range(len(self.dataset)):
                data = self.dataset[index]
                values = self._forward(data)["values"]
                loss = self.critic_coef * (data["returns"] - values).pow(2).mean()
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.trancate_gradients_and_step()
                losses.append(loss.detach())
            lr, self.entropy_coef = self.scheduler.update(
                self.last_lr, self.entropy_coef, self.epoch_num, self.frame, self.last_step.get("kl", 0.0)
            )
            self.last_lr = spmd.rank0_value(self, lr)
            self.update_lr(self.last_lr)
        return losses

    def update_lr(self, lr: float) -> None:
        # Local only (rl_games' version broadcasts, a collective that PBT's rank-0-only calls would hang).
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def train(self) -> Any:
        with spmd.cpu_device_guard(self), spmd.cpu_object_broadcasts(self):
            return super().train()
