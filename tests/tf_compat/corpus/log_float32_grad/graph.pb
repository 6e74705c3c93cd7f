
2
xPlaceholder*
dtype0*
shape
:

LogLogx*
T0
p
dy0Const*
dtype0*U
valueLBJ"<I	¬¿¸~¾Ïž¿K¨>‘Ëï?Ñ*¬?ü.ˆ¾îõ˜>E;}¿quà½ƒõƒ?ÿá¿¡Ó9¿ž^^¿ŸÜÖ>
m
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Log*&
 _has_manual_control_dependencies(
e
gradients/Log_grad/Reciprocal
Reciprocalx^gradients/grad_ys_0*
T0*
_class

loc:@Log
r
gradients/Log_grad/mulMulgradients/grad_ys_0gradients/Log_grad/Reciprocal*
T0*
_class

loc:@Log
0
dx0Identitygradients/Log_grad/mul*
T0"ª