
:
vPlaceholder*
dtype0*
shape:
.
bPlaceholder*
dtype0*
shape:
8
BiasAddBiasAddvb*
T0*
data_formatNCHW
à
dy0Const*
dtype0*Ä
valueºB·" à=ÀÈSû>ú÷Z?›T,@jSØ¾ùSë¿ªèö?Y_¾1?b0T¿¹’­?î¿K½g Ä½Tr^>0Kp¿{w¿l†c?–¿TsB¿´ƒ¡?¨mì?*;ˆ>…ö¾ÑdÄ?gWš>Æ…?º³@›Ë¿ »?Š/Àéz¿ª‘¿öÀ ¾^Ër?ífe¾*?\?SE¿a´Ç¿ô¹¯¿…+(¿9V?÷j?tuy¿·Ä‘?rå,?-Ğ
@Şe^?eÈ‘>+Æõ¿èëJ¿óR,¾É G>!³f?À&8¿k\`¿ï%‚?.	ğ¿TG?â¿´®¿}´Ç?<ù`@IMÔ¿ñ`@¼@¦í?tô$¾–¹½ÚÚş>ş«¡¼C³%?ÜÚÓ¾
I
gradients/grad_ys_0Identitydy0*
T0*
_class
loc:@BiasAdd
‚
"gradients/BiasAdd_grad/BiasAddGradBiasAddGradgradients/grad_ys_0*
T0*
_class
loc:@BiasAdd*
data_formatNCHW
-
dx0Identitygradients/grad_ys_0*
T0
<
dx1Identity"gradients/BiasAdd_grad/BiasAddGrad*
T0"ª