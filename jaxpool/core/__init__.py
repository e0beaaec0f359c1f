"""What every op family uses: argument checks (``checks``), dtypes (``dtypes``), argument
types (``types``), remembered plans (``memo``), the ops' compiled programs and their
static arrays (``program``), derivative-rule building blocks (``rules``),
the read at data positions and its sorted-sum transpose (``gather``), products that keep
inf and NaN where torch's do (``nonfinite``), docstring templates (``docs``) and the
warnings' stack level (``stack``). Nothing here knows an op."""
