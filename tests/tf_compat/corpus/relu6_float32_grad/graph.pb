
2
xPlaceholder*
dtype0*
shape
:

Relu6Relu6x*
T0
p
dy0Const*
dtype0*U
valueLBJ"<þöE¾|ü<¿‘2?¿dÃÂ¿éZË>Ü}ˆ¿.÷…¿ªŒ¿óH%?+nõ=Ùà6¾B»>+{¶¿Fl.ÀÒi¿
G
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Relu6
j
gradients/Relu6_grad/Relu6Grad	Relu6Gradgradients/grad_ys_0Relu6*
T0*
_class

loc:@Relu6
8
dx0Identitygradients/Relu6_grad/Relu6Grad*
T0"ª