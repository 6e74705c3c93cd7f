
2
xPlaceholder*
dtype0*
shape
:

SqrtSqrtx*
T0
p
dy0Const*
dtype0*U
valueLBJ"<h›Ó¿“œ¿?È=@ß‚<CŸ?=év¿5”n¿9¿Ÿ J>­«˜¿<a¿Kj.?K—?aˆ?½1¾
F
gradients/grad_ys_0Identitydy0*
T0*
_class
	loc:@Sqrt
e
gradients/Sqrt_grad/SqrtGradSqrtGradSqrtgradients/grad_ys_0*
T0*
_class
	loc:@Sqrt
6
dx0Identitygradients/Sqrt_grad/SqrtGrad*
T0"ª