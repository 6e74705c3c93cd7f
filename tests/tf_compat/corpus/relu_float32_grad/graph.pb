
2
xPlaceholder*
dtype0*
shape
:

ReluRelux*
T0
p
dy0Const*
dtype0*U
valueLBJ"<V∞Óæ Û∞øÊàl?òò>'≠X?]Pøv{?*†÷øY≤—>ítCøèÒ+æ]û@ÑjÖ?uú?lYæ
F
gradients/grad_ys_0Identitydy0*
T0*
_class
	loc:@Relu
e
gradients/Relu_grad/ReluGradReluGradgradients/grad_ys_0Relu*
T0*
_class
	loc:@Relu
6
dx0Identitygradients/Relu_grad/ReluGrad*
T0"™