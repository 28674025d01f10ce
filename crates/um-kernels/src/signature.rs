//! Kernel signatures: parsed from the `extern "C" __global__` declarations of `kernels-ptx/*.cu`
//! and checked against the `.entry` parameter lists of the PTX that nvcc produced.
//!
//! Shared by `build.rs` (which generates the typed launchers from it and fails the build on a
//! mismatch) and by this crate's tests (`#[path]`-included in both).

/// A scalar type a kernel parameter (or a pointer's element) may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
    F32,
    F64,
    I32,
    U32,
    I64,
    U64,
}

impl Scalar {
    pub(crate) fn from_c(ty: &str) -> Option<Scalar> {
        Some(match ty {
            "float" => Scalar::F32,
            "double" => Scalar::F64,
            "int" | "signed" | "signed int" => Scalar::I32,
            "unsigned" | "unsigned int" => Scalar::U32,
            "long long" | "long long int" | "signed long long" => Scalar::I64,
            "unsigned long long" | "unsigned long long int" => Scalar::U64,
            _ => return None,
        })
    }

    pub(crate) fn rust(self) -> &'static str {
        match self {
            Scalar::F32 => "f32",
            Scalar::F64 => "f64",
            Scalar::I32 => "i32",
            Scalar::U32 => "u32",
            Scalar::I64 => "i64",
            Scalar::U64 => "u64",
        }
    }

    pub(crate) fn c(self) -> &'static str {
        match self {
            Scalar::F32 => "float",
            Scalar::F64 => "double",
            Scalar::I32 => "int",
            Scalar::U32 => "unsigned int",
            Scalar::I64 => "long long",
            Scalar::U64 => "unsigned long long",
        }
    }

    /// Whether a PTX `.param` type carries this scalar (integers by width; nvcc writes `int`
    /// as `.u32`).
    fn matches_ptx(self, ptx: &str) -> bool {
        match self {
            Scalar::F32 => ptx == "f32",
            Scalar::F64 => ptx == "f64",
            Scalar::I32 | Scalar::U32 => matches!(ptx, "u32" | "s32" | "b32"),
            Scalar::I64 | Scalar::U64 => matches!(ptx, "u64" | "s64" | "b64"),
        }
    }
}

/// One kernel parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParamKind {
    /// `T *` (written) or `const T *` (read only).
    Pointer {
        elem: Scalar,
        constant: bool,
    },
    Value(Scalar),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) kind: ParamKind,
}

/// One `extern "C" __global__ void` kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelSig {
    pub(crate) name: String,
    pub(crate) params: Vec<Param>,
    /// The declaration as written, whitespace collapsed.
    pub(crate) decl: String,
}

fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
            out.push(' ');
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn parse_param(kernel: &str, text: &str) -> Result<Param, String> {
    let text = text.trim();
    let pointer = text.matches('*').count();
    if pointer > 1 {
        return Err(format!(
            "kernel {kernel}: parameter `{text}`: pointers to pointers are not supported"
        ));
    }
    let spaced = text.replace('*', " * ");
    let mut words: Vec<&str> = spaced.split_whitespace().collect();
    let name = words
        .pop()
        .filter(|w| w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .ok_or_else(|| format!("kernel {kernel}: parameter `{text}` has no name"))?;
    let constant = words.first() == Some(&"const");
    let ty: Vec<&str> = words
        .into_iter()
        .filter(|w| *w != "const" && *w != "*")
        .collect();
    let ty = ty.join(" ");
    let scalar = Scalar::from_c(&ty).ok_or_else(|| {
        format!("kernel {kernel}: parameter `{text}`: type `{ty}` is not supported")
    })?;
    let kind = if pointer == 1 {
        ParamKind::Pointer {
            elem: scalar,
            constant,
        }
    } else {
        ParamKind::Value(scalar)
    };
    Ok(Param {
        name: name.to_owned(),
        kind,
    })
}

/// Every `extern "C" __global__ void NAME(...)` of a CUDA source.
pub(crate) fn parse_cuda(src: &str) -> Result<Vec<KernelSig>, String> {
    let src = strip_comments(src);
    let marker = "__global__";
    let mut kernels = Vec::new();
    let mut rest = src.as_str();
    while let Some(at) = rest.find(marker) {
        let before = &rest[..at];
        let after = &rest[at + marker.len()..];
        let line_start = before.rfind(['\n', ';', '}']).map_or(0, |i| i + 1);
        let prefix: Vec<&str> = before[line_start..].split_whitespace().collect();
        let close = after.find(')').ok_or("unterminated kernel declaration")?;
        let head = &after[..close];
        rest = &after[close..];
        let open = head
            .find('(')
            .ok_or("kernel declaration without parameters")?;
        let name_part: Vec<&str> = head[..open].split_whitespace().collect();
        let decl = format!(
            "{} {marker} {})",
            prefix.join(" "),
            head.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        if prefix != ["extern", "\"C\""]
            || name_part.first() != Some(&"void")
            || name_part.len() != 2
        {
            return Err(format!(
                "`{decl}`: kernels must be declared `extern \"C\" __global__ void name(...)`"
            ));
        }
        let name = name_part[1].to_owned();
        let params_text = head[open + 1..].trim();
        let params = if params_text.is_empty() || params_text == "void" {
            Vec::new()
        } else {
            params_text
                .split(',')
                .map(|p| parse_param(&name, p))
                .collect::<Result<Vec<_>, _>>()?
        };
        kernels.push(KernelSig { name, params, decl });
    }
    Ok(kernels)
}

/// The `.entry` kernels of a PTX text with the types of their `.param`s.
pub(crate) fn parse_ptx_entries(ptx: &str) -> Vec<(String, Vec<String>)> {
    let mut entries = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        let after = &rest[at + ".entry ".len()..];
        let open = after.find('(').unwrap_or(after.len());
        let name = after[..open].trim().to_owned();
        let close = after.find(')').unwrap_or(after.len());
        let params = after[open.min(close)..close]
            .split(',')
            .filter_map(|p| {
                let mut words = p
                    .split_whitespace()
                    .skip_while(|w| !w.starts_with(".param"));
                words.next()?;
                words
                    .find(|w| {
                        w.starts_with('.') && !w.starts_with(".ptr") && !w.starts_with(".align")
                    })
                    .map(|w| w.trim_start_matches('.').to_owned())
            })
            .collect();
        entries.push((name, params));
        rest = &after[close..];
    }
    entries
}

/// Checks each kernel's parameters against its `.entry` in `ptx`: same count, pointers as
/// 64-bit values, scalars of the same class and width.
pub(crate) fn check_against_ptx(kernels: &[KernelSig], ptx: &str) -> Result<(), String> {
    let entries = parse_ptx_entries(ptx);
    for k in kernels {
        let (_, ptx_params) = entries
            .iter()
            .find(|(n, _)| *n == k.name)
            .ok_or_else(|| format!("kernel {}: no `.entry {}` in the PTX", k.name, k.name))?;
        if ptx_params.len() != k.params.len() {
            return Err(format!(
                "kernel {}: the declaration has {} parameters, the PTX entry {} ({:?})",
                k.name,
                k.params.len(),
                ptx_params.len(),
                ptx_params
            ));
        }
        for (i, (p, ptx_ty)) in k.params.iter().zip(ptx_params).enumerate() {
            let ok = match p.kind {
                ParamKind::Pointer { .. } => ptx_ty == "u64" || ptx_ty == "b64",
                ParamKind::Value(s) => s.matches_ptx(ptx_ty),
            };
            if !ok {
                return Err(format!(
                    "kernel {}: parameter {i} `{}` is {:?} in the declaration but .{ptx_ty} in the PTX",
                    k.name, p.name, p.kind
                ));
            }
        }
    }
    Ok(())
}

/// The launcher rule: every pointer parameter is a buffer of `n` elements, where `n` is a
/// scalar parameter of that name (filled in from the buffers); a kernel without pointers needs
/// no `n`.
pub(crate) fn check_launcher_convention(k: &KernelSig) -> Result<(), String> {
    let has_pointer = k
        .params
        .iter()
        .any(|p| matches!(p.kind, ParamKind::Pointer { .. }));
    let count = k.params.iter().find(|p| p.name == "n");
    match (has_pointer, count.map(|p| &p.kind)) {
        (true, Some(ParamKind::Value(s))) if !matches!(s, Scalar::F32 | Scalar::F64) => Ok(()),
        (true, _) => Err(format!(
            "kernel {}: a kernel with pointer parameters needs an integer count parameter named `n` \
             (see kernels-ptx/README.md)",
            k.name
        )),
        (false, _) => Ok(()),
    }
}
