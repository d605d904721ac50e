//! Cycles in a directed graph: its strongly connected groups, and one cycle through each.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Each strongly connected group of nodes (Tarjan's algorithm), with one cycle through it (a
/// shortest path back to its first node inside the group).
pub(super) fn find_cycles<'a>(
    edges: impl Iterator<Item = &'a (String, String)>,
) -> Vec<(Vec<String>, Vec<String>)> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    let nodes: Vec<&str> = next.keys().copied().collect();
    let index_of: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let adjacency: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| next[n].iter().map(|t| index_of[t]).collect())
        .collect();
    let groups = strongly_connected(&adjacency);
    let mut cycles = Vec::new();
    for group in groups.into_iter().filter(|g| g.len() > 1) {
        let inside: BTreeSet<usize> = group.iter().copied().collect();
        let start = group[0];
        // Breadth-first from start back to start, staying inside the group.
        let mut parent: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        let mut found = None;
        'search: while let Some(node) = queue.pop_front() {
            for &to in &adjacency[node] {
                if !inside.contains(&to) {
                    continue;
                }
                if to == start {
                    found = Some(node);
                    break 'search;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = parent.entry(to) {
                    e.insert(node);
                    queue.push_back(to);
                }
            }
        }
        let mut path = Vec::new();
        let mut node = found.expect("a strongly connected group has a cycle through each node");
        while node != start {
            path.push(nodes[node].to_owned());
            node = parent[&node];
        }
        path.push(nodes[start].to_owned());
        path.reverse();
        let members = group.iter().map(|&n| nodes[n].to_owned()).collect();
        cycles.push((members, path));
    }
    cycles
}

/// Tarjan's strongly connected components over node indexes.
fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next_index: usize,
        groups: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next_index);
        s.low[v] = s.next_index;
        s.next_index += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for i in 0..s.adjacency[v].len() {
            let w = s.adjacency[v][i];
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(w_index) if s.on_stack[w] => s.low[v] = s.low[v].min(w_index),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                group.push(w);
                if w == v {
                    break;
                }
            }
            group.sort_unstable();
            s.groups.push(group);
        }
    }
    let n = adjacency.len();
    let mut state = State {
        adjacency,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next_index: 0,
        groups: Vec::new(),
    };
    for v in 0..n {
        if state.index[v].is_none() {
            visit(&mut state, v);
        }
    }
    state.groups
}
