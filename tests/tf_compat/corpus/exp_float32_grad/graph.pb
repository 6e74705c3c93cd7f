
2
xPlaceholder*
dtype0*
shape
:

ExpExpx*
T0
p
dy0Const*
dtype0*U
valueLBJ"<¢¥ˆ?ëñ£¿£y¿µYÁ¾,¿*w?¤G'>ŒP?švÚ>éÆ=ÔG?Ê¾Œ?qœ‰¾&Ô@¾0˜>
m
gradients/grad_ys_0Identitydy0*
T0*
_class

loc:@Exp*&
 _has_manual_control_dependencies(
X
gradients/Exp_grad/mulMulgradients/grad_ys_0Exp*
T0*
_class

loc:@Exp
0
dx0Identitygradients/Exp_grad/mul*
T0"ª