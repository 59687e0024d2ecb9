"""A small floating-base walker (7 bodies, 6 hinge joints, 6 position actuators) in MJCF.

Cheap to step on every backend: the contract tests and the backend benchmarks use it until the
G1 model of fuselab-envs is there to measure with.
"""

# A floating torso on two 3-joint legs, position actuators (kp 80, kv 4), on a floor.
WALKER_XML = """
<mujoco model="test_walker">
  <compiler angle="radian"/>
  <option timestep="0.005"/>
  <default>
    <joint damping="0.5" armature="0.01" range="-1.2 1.2"/>
    <geom friction="0.8 0.02 0.01" density="500"/>
    <position kp="80" kv="4" ctrlrange="-1.2 1.2"/>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="0 0 0.05"/>
    <body name="torso" pos="0 0 0.75">
      <freejoint name="root"/>
      <geom name="torso_geom" type="box" size="0.12 0.09 0.15"/>
      <body name="left_thigh" pos="0 0.07 -0.15">
        <joint name="left_hip_pitch" axis="0 1 0"/>
        <joint name="left_hip_roll" axis="1 0 0" range="-0.5 0.5"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.25" size="0.04"/>
        <body name="left_shin" pos="0 0 -0.25">
          <joint name="left_knee" axis="0 1 0" range="0 2.0"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.25" size="0.035"/>
          <body name="left_foot" pos="0 0 -0.28">
            <geom name="left_foot_geom" type="box" size="0.07 0.03 0.02"/>
          </body>
        </body>
      </body>
      <body name="right_thigh" pos="0 -0.07 -0.15">
        <joint name="right_hip_pitch" axis="0 1 0"/>
        <joint name="right_hip_roll" axis="1 0 0" range="-0.5 0.5"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.25" size="0.04"/>
        <body name="right_shin" pos="0 0 -0.25">
          <joint name="right_knee" axis="0 1 0" range="0 2.0"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.25" size="0.035"/>
          <body name="right_foot" pos="0 0 -0.28">
            <geom name="right_foot_geom" type="box" size="0.07 0.03 0.02"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position name="left_hip_pitch" joint="left_hip_pitch"/>
    <position name="left_hip_roll" joint="left_hip_roll"/>
    <position name="left_knee" joint="left_knee"/>
    <position name="right_hip_pitch" joint="right_hip_pitch"/>
    <position name="right_hip_roll" joint="right_hip_roll"/>
    <position name="right_knee" joint="right_knee"/>
  </actuator>
</mujoco>
"""
