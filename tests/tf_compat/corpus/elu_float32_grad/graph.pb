
2
xPlaceholder*
dtype0*
shape
:

EluElux*
T0
p
dy0Const*
dtype0*U
valueLBJ"<Ÿ ?ˆ¿’¾+¿&²Ù½;é>ïõ¦¿1@µ=ºÝ¸¿Ñ>@ßUî¾P–í¾ÎûË¾~?@/_*¿êžU¿
E
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Elu
`
gradients/Elu_grad/EluGradEluGradgradients/grad_ys_0Elu*
T0*
_class

loc:@Elu
4
dx0Identitygradients/Elu_grad/EluGrad*
T0"ª