//! A BERT encoder (the architecture of all-MiniLM-L6-v2 and other small sentence encoders) for
//! inference on the CPU: token, position and segment embeddings with a LayerNorm, then post-norm
//! transformer layers of masked multi-head self-attention and a GELU feed-forward block. Sizes
//! come from the model's `config.json`, weights from `model.safetensors` (Hugging Face names).

use candle_core::{D, DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder, embedding, layer_norm, linear};
use serde::Deserialize;

/// The fields of `config.json` the encoder needs.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    #[serde(default = "default_position_embedding_type")]
    pub position_embedding_type: String,
}

fn default_hidden_act() -> String {
    "gelu".into()
}

fn default_position_embedding_type() -> String {
    "absolute".into()
}

impl BertConfig {
    /// Refuses configurations this encoder does not implement.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.hidden_act != "gelu" {
            return Err(format!(
                "hidden_act {:?} is not supported (only gelu)",
                self.hidden_act
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type {:?} is not supported (only absolute)",
                self.position_embedding_type
            ));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        Ok(())
    }
}

struct Embeddings {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
}

impl Embeddings {
    fn load(config: &BertConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Embeddings {
            word: embedding(
                config.vocab_size,
                config.hidden_size,
                vb.pp("word_embeddings"),
            )?,
            position: embedding(
                config.max_position_embeddings,
                config.hidden_size,
                vb.pp("position_embeddings"),
            )?,
            token_type: embedding(
                config.type_vocab_size,
                config.hidden_size,
                vb.pp("token_type_embeddings"),
            )?,
            norm: layer_norm(
                config.hidden_size,
                config.layer_norm_eps,
                vb.pp("LayerNorm"),
            )?,
        })
    }

    fn forward(&self, input_ids: &Tensor, token_type_ids: &Tensor) -> Result<Tensor> {
        let seq_len = input_ids.dim(1)?;
        let positions = Tensor::arange(0u32, seq_len as u32, input_ids.device())?;
        let x = self
            .word
            .forward(input_ids)?
            .add(&self.token_type.forward(token_type_ids)?)?
            .broadcast_add(&self.position.forward(&positions)?)?;
        self.norm.forward(&x)
    }
}

/// A dense layer, `x · Wᵀ + b`, with `Wᵀ` laid out once at load time.
///
/// The checkpoint stores `W` as `(out, in)` rows, and candle's `Linear` multiplies by a
/// transposed view of it on every call. For a batch of many tokens the matrix library packs that
/// view into its own layout anyway, but a search's question is a few tokens, too few to pack
/// for, and its products read the view column by column.
struct Dense {
    /// `(in, out)`, contiguous.
    weight: Tensor,
    bias: Tensor,
}

impl Dense {
    fn load(inputs: usize, outputs: usize, vb: VarBuilder) -> Result<Self> {
        let linear = linear(inputs, outputs, vb)?;
        let Some(bias) = linear.bias().cloned() else {
            candle_core::bail!("a dense layer without its bias");
        };
        Ok(Dense {
            weight: linear.weight().t()?.contiguous()?,
            bias,
        })
    }

    /// `x`: `(batch, seq, in)` to `(batch, seq, out)`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (batch, seq, inputs) = x.dims3()?;
        x.contiguous()?
            .reshape((batch * seq, inputs))?
            .matmul(&self.weight)?
            .reshape((batch, seq, ()))?
            .broadcast_add(&self.bias)
    }
}

struct Layer {
    query: Dense,
    key: Dense,
    value: Dense,
    attention_out: Dense,
    attention_norm: LayerNorm,
    intermediate: Dense,
    output: Dense,
    output_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
}

impl Layer {
    fn load(config: &BertConfig, vb: VarBuilder) -> Result<Self> {
        let hidden = config.hidden_size;
        let attention = vb.pp("attention");
        let this = attention.pp("self");
        Ok(Layer {
            query: Dense::load(hidden, hidden, this.pp("query"))?,
            key: Dense::load(hidden, hidden, this.pp("key"))?,
            value: Dense::load(hidden, hidden, this.pp("value"))?,
            attention_out: Dense::load(hidden, hidden, attention.pp("output").pp("dense"))?,
            attention_norm: layer_norm(
                hidden,
                config.layer_norm_eps,
                attention.pp("output").pp("LayerNorm"),
            )?,
            intermediate: Dense::load(
                hidden,
                config.intermediate_size,
                vb.pp("intermediate").pp("dense"),
            )?,
            output: Dense::load(
                config.intermediate_size,
                hidden,
                vb.pp("output").pp("dense"),
            )?,
            output_norm: layer_norm(
                hidden,
                config.layer_norm_eps,
                vb.pp("output").pp("LayerNorm"),
            )?,
            heads: config.num_attention_heads,
            head_dim: hidden / config.num_attention_heads,
        })
    }

    /// `(batch, seq, heads * head_dim)` to `(batch, heads, seq, head_dim)`.
    fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let (batch, seq, _) = x.dims3()?;
        x.reshape((batch, seq, self.heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()
    }

    /// `x`: `(batch, seq, hidden)`; `mask_bias`: `(batch, 1, 1, seq)`, 0 on tokens and a large
    /// negative number on padding, so no token attends to padding.
    fn forward(&self, x: &Tensor, mask_bias: &Tensor) -> Result<Tensor> {
        let (batch, seq, hidden) = x.dims3()?;
        let q = self.split_heads(&self.query.forward(x)?)?;
        let k = self.split_heads(&self.key.forward(x)?)?;
        let v = self.split_heads(&self.value.forward(x)?)?;
        let scores = (q.matmul(&k.t()?)? / (self.head_dim as f64).sqrt())?;
        let probs = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(mask_bias)?)?;
        let context = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .reshape((batch, seq, hidden))?;
        let x = self
            .attention_norm
            .forward(&(self.attention_out.forward(&context)? + x)?)?;
        let h = gelu(&self.intermediate.forward(&x)?)?;
        self.output_norm.forward(&(self.output.forward(&h)? + x)?)
    }
}

/// GELU, `x · Φ(x) = x/2 · (1 + erf(x/√2))`, over an f32 tensor (the exact form BERT is trained
/// with, not the tanh approximation).
///
/// Candle's own `gelu_erf` calls a scalar `erf` for each element: in a profile of the indexer's
/// embeddings it took 17% of the model's time, the matrix products 57%. [`erf`] here is a rational
/// function the compiler vectorises, within 5e-7 of the exact `erf` in f32.
fn gelu(x: &Tensor) -> Result<Tensor> {
    if x.dtype() != DType::F32 {
        return x.gelu_erf();
    }
    x.contiguous()?.apply_op1_no_bwd(&Gelu)
}

struct Gelu;

impl candle_core::CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "gelu-rational-erf"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let (candle_core::CpuStorage::F32(data), Some((start, end))) =
            (storage, layout.contiguous_offsets())
        else {
            candle_core::bail!("gelu expects a contiguous f32 tensor");
        };
        let out: Vec<f32> = data[start..end]
            .iter()
            .map(|&x| 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)))
            .collect();
        Ok((candle_core::CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// `erf(x)` as `x · P(x²) / Q(x²)` on `[-4, 4]` (beyond which erf is ±1 in f32), with `P` of
/// degree 6 and `Q` of degree 4. The coefficients were fitted for this project by least squares
/// on 20,001 points of `[0, 4]`, reweighted by `1/Q`; evaluated in f32 the error is under 5e-7
/// everywhere (a test checks it against the exact function).
fn erf(x: f32) -> f32 {
    const P: [f32; 7] = [
        1.128_378_8,
        0.206_113_62,
        0.051_386_006,
        0.003_965_618,
        0.000_148_224_58,
        -1.977_515_7e-6,
        1.966_793e-8,
    ];
    const Q: [f32; 5] = [1.0, 0.515_992_6, 0.117_553_34, 0.014_880_658, 0.001_020_474];
    let x = x.clamp(-4.0, 4.0);
    let t = x * x;
    let p = P.iter().rev().fold(0.0, |acc, &c| acc * t + c);
    let q = Q.iter().rev().fold(0.0, |acc, &c| acc * t + c);
    x * p / q
}

/// The encoder; [`Bert::forward`] gives the last hidden states.
pub struct Bert {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    device: Device,
}

impl Bert {
    /// Builds the encoder from weights named as in Hugging Face's `BertModel` (with or without a
    /// leading `bert.`).
    pub fn load(config: &BertConfig, vb: VarBuilder) -> Result<Self> {
        let vb = if vb.contains_tensor("embeddings.word_embeddings.weight") {
            vb
        } else {
            vb.pp("bert")
        };
        let embeddings = Embeddings::load(config, vb.pp("embeddings"))?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(config, vb.pp("encoder").pp("layer").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            embeddings,
            layers,
            device: vb.device().clone(),
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `input_ids`, `token_type_ids`: `(batch, seq)` u32; `attention_mask`: `(batch, seq)` f32,
    /// 1 on tokens and 0 on padding. Returns `(batch, seq, hidden)`.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: &Tensor,
        attention_mask: &Tensor,
    ) -> Result<Tensor> {
        let (batch, seq) = attention_mask.dims2()?;
        // (1 - mask) * -1e9: softmax then gives padding exactly zero weight in f32.
        let mask_bias = ((attention_mask.ones_like()? - attention_mask)? * -1e9)?
            .to_dtype(DType::F32)?
            .reshape((batch, 1, 1, seq))?;
        let mut x = self.embeddings.forward(input_ids, token_type_ids)?;
        for layer in &self.layers {
            x = layer.forward(&x, &mask_bias)?;
        }
        Ok(x)
    }
}

/// Mean of `hidden` (`(batch, seq, hidden)`) over the tokens where `attention_mask`
/// (`(batch, seq)`, 1 or 0) is 1: the sentence-transformers mean pooling.
pub fn mean_pool(hidden: &Tensor, attention_mask: &Tensor) -> Result<Tensor> {
    let mask = attention_mask.unsqueeze(D::Minus1)?;
    let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
    let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
    summed.broadcast_div(&counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_config() -> BertConfig {
        BertConfig {
            vocab_size: 11,
            hidden_size: 8,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            intermediate_size: 16,
            max_position_embeddings: 16,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            hidden_act: "gelu".into(),
            position_embedding_type: "absolute".into(),
        }
    }

    /// Random weights: enough to check shapes and that padding changes nothing.
    fn tiny_model() -> Result<Bert> {
        let varmap = candle_nn::VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        let config = tiny_config();
        config.check().map_err(candle_core::Error::msg)?;
        Bert::load(&config, vb.clone())?;
        // VarMap initialises LayerNorm to identity; perturb every variable so the test means
        // something, then load again: dense layers copy their weights at load time.
        for (i, var) in varmap.all_vars().iter().enumerate() {
            let noise = Tensor::randn(0f32, 0.5, var.shape(), &Device::Cpu)?;
            var.set(&(var.as_tensor() + noise)?.affine(1.0, i as f64 * 1e-3)?)?;
        }
        Bert::load(&config, vb)
    }

    #[test]
    fn a_dense_layer_computes_what_candles_linear_does() -> Result<()> {
        let varmap = candle_nn::VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        let dense = Dense::load(5, 3, vb.pp("d"))?;
        let linear = linear(5, 3, vb.pp("d"))?;
        // One token and several, as a search's question and a batch of documents are.
        for seq in [1, 7] {
            let x = Tensor::randn(0f32, 1.0, (2, seq, 5), &Device::Cpu)?;
            let ours = dense.forward(&x)?;
            let theirs = linear.forward(&x)?;
            assert_eq!(ours.dims(), &[2, seq, 3]);
            let gap = (ours - theirs)?
                .abs()?
                .flatten_all()?
                .max(0)?
                .to_scalar::<f32>()?;
            assert!(gap < 1e-5, "largest difference {gap}");
        }
        Ok(())
    }

    #[test]
    fn padding_does_not_change_the_pooled_vector() -> Result<()> {
        let model = tiny_model()?;
        let device = Device::Cpu;
        let alone = Tensor::new(&[[1u32, 5, 7, 2]], &device)?;
        let alone_mask = Tensor::new(&[[1f32, 1., 1., 1.]], &device)?;
        let types = alone.zeros_like()?;
        let pooled_alone = mean_pool(&model.forward(&alone, &types, &alone_mask)?, &alone_mask)?;

        let padded = Tensor::new(&[[1u32, 5, 7, 2, 0, 0], [1, 3, 2, 0, 0, 0]], &device)?;
        let padded_mask = Tensor::new(
            &[[1f32, 1., 1., 1., 0., 0.], [1., 1., 1., 0., 0., 0.]],
            &device,
        )?;
        let types = padded.zeros_like()?;
        let hidden = model.forward(&padded, &types, &padded_mask)?;
        assert_eq!(hidden.dims(), &[2, 6, 8]);
        let pooled = mean_pool(&hidden, &padded_mask)?;

        let a = pooled_alone.flatten_all()?.to_vec1::<f32>()?;
        let b = pooled.get(0)?.to_vec1::<f32>()?;
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
        Ok(())
    }

    #[test]
    fn the_rational_erf_is_within_5e_7_of_the_exact_one() {
        // Every 1e-5 over [-6, 6], against the exact function in f64.
        let worst = (-600_000..=600_000)
            .map(|i| {
                let x = i as f32 * 1e-5;
                (f64::from(erf(x)) - libm::erf(f64::from(x))).abs()
            })
            .fold(0.0, f64::max);
        assert!(worst < 5e-7, "{worst}");
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(-1.5), -erf(1.5));
    }

    #[test]
    fn gelu_matches_candles_exact_one() -> Result<()> {
        let x = Tensor::arange(-800i64, 800, &Device::Cpu)?
            .to_dtype(DType::F32)?
            .affine(0.01, 0.0)?
            .reshape((2, 8, 100))?;
        let ours = gelu(&x)?.flatten_all()?.to_vec1::<f32>()?;
        let theirs = x.gelu_erf()?.flatten_all()?.to_vec1::<f32>()?;
        let worst = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 4e-6, "{worst}");
        // A view that is not contiguous is made so first.
        let t = gelu(&x.transpose(1, 2)?)?;
        assert_eq!(t.dims(), [2, 100, 8]);
        Ok(())
    }

    #[test]
    fn unsupported_configs_are_refused() {
        let mut config = tiny_config();
        config.hidden_act = "relu".into();
        assert!(config.check().unwrap_err().contains("hidden_act"));
        let mut config = tiny_config();
        config.num_attention_heads = 3;
        assert!(config.check().unwrap_err().contains("multiple"));
    }
}
